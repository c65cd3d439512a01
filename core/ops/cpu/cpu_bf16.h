// bfloat16 storage for the CPU kernels: the type, f32 <-> bf16 conversion (round to nearest even), and a dispatch on f32/bf16.
#pragma once
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/half_bits.h"

namespace trainer::cpu {

// The upper 16 bits of an IEEE float: same exponent range, 8 bits of mantissa. Kernels load it
// into float registers, compute in float, and round once when storing.
struct bf16 {
  uint16_t bits;
};

inline float to_f32(float v) { return v; }
inline float to_f32(bf16 v) { return half_bits::f32_from_bf16(v.bits); }

// Round to nearest, ties to even (as oneDNN's reorders and PyTorch); a NaN stays a (quiet) NaN.
// The bit manipulation the CUDA kernels use too (half_bits.h).
inline bf16 round_bf16(float v) { return bf16{half_bits::bf16_from_f32(v)}; }

// Stores a float as T (float: as is; bf16: rounded).
template <class T>
inline T from_f32(float v);
template <>
inline float from_f32<float>(float v) {
  return v;
}
template <>
inline bf16 from_f32<bf16>(float v) {
  return round_bf16(v);
}

// n bf16 values widened to f32 (exact: bf16 is the upper half of an f32), and n f32 values rounded
// to bf16, on the calling thread's OpenMP team.
inline void widen_bf16(const bf16* __restrict a, float* __restrict o, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) o[i] = to_f32(a[i]);
}
inline void round_to_bf16(const float* __restrict a, bf16* __restrict o, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) o[i] = round_bf16(a[i]);
}

// Calls f(T{}) with T = float for an f32 tensor and T = bf16 for a bf16 one; anything else is an
// invalid_argument naming the op and tensor.
template <class F>
decltype(auto) dispatch_float(const char* op, const char* name, const Tensor& t, F&& f) {
  if (t.dtype() == DType::F32) return f(float{});
  if (t.dtype() == DType::BF16) return f(bf16{});
  fail("{}: {} must be f32 or bf16, got {}", op, name, dtype_name(t.dtype()));
}

}  // namespace trainer::cpu
