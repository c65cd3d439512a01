// DType: element types of tensors (fp32 by default; bf16/fp16 for mixed precision; i32 labels).
#pragma once
#include <cstddef>

namespace trainer {

enum class DType { F32, BF16, F16, I32, U8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::U8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::U8: return "u8";
  }
  return "?";
}

}  // namespace trainer
