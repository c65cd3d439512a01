// Axis permutation index math shared by the CPU and CUDA permute kernels: the input element under each output element.
#pragma once
#include <cstdint>

#include "core/ops/math/hd.h"

namespace trainer::permute_math {

constexpr int kMaxRank = 4;  // the batch and three axes of a sample

// y's dims (row-major) and, for each of y's axes, the stride in x of the x axis it comes from.
struct Index {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};

  // The offset in x of y's element e.
  TRAINER_HD_INLINE int64_t source(int64_t e) const {
    int64_t off = 0;
    for (int k = rank - 1; k >= 0; --k) {
      const int64_t q = e / dims[k];
      off += (e - q * dims[k]) * strides[k];
      e = q;
    }
    return off;
  }
};

// The index of y = x with its axes permuted: y's axis k is x's axis perm[k] (perm a permutation of
// 0..rank-1; x_dims row-major).
inline Index make_index(const int64_t* x_dims, const int* perm, int rank) {
  Index ix;
  ix.rank = rank;
  int64_t stride[kMaxRank] = {};
  int64_t s = 1;
  for (int k = rank - 1; k >= 0; --k) {
    stride[k] = s;
    s *= x_dims[k];
  }
  for (int k = 0; k < rank; ++k) {
    ix.dims[k] = x_dims[perm[k]];
    ix.strides[k] = stride[perm[k]];
  }
  return ix;
}

}  // namespace trainer::permute_math
