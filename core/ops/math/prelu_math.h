// Keras's PReLU at one element (forward, input gradient, the alpha gradient's term) and the index map between an input and its broadcast alpha, shared by the CPU and CUDA prelu kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/ops/math/hd.h"

namespace trainer::prelu_math {

constexpr int kMaxRank = 4;  // axes of one sample after merging neighbours that share alike

// Keras computes relu(x) − alpha·relu(−x): x where x > 0, alpha·x (one rounding) where x < 0, and
// ±0 at ±0; a NaN stays NaN. (A lone product: nothing to contract it with.)
TRAINER_HD_INLINE float forward(float x, float alpha) { return x > 0.0f ? x : alpha * x; }
// dx: dy where x > 0, alpha·dy where x < 0, and 0 at x = 0 (TensorFlow's relu gradient is 0 there,
// on both of Keras's branches; PyTorch's prelu gives alpha·dy).
TRAINER_HD_INLINE float input_grad(float x, float alpha, float dy) {
  return x > 0.0f ? dy : x < 0.0f ? alpha * dy : 0.0f;
}
// The alpha gradient's term of one element, dy·min(x, 0), exact in double (summed in double by
// the caller and rounded once to f32).
TRAINER_HD_INLINE double alpha_term(float x, float dy) { return x < 0.0f ? double(dy) * double(x) : 0.0; }

// A sample of shape dims[0..rank) (row-major) whose axes are each shared (alpha has 1 there) or
// not. An element is (n, j), j the position in its sample; alpha's index c runs over the unshared
// axes (row-major), the reduction's index r over (n, the shared axes) (row-major, n outermost).
struct Index {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  bool shared[kMaxRank] = {};
  int64_t sample = 1;  // elements per sample
  int64_t alphas = 1;  // alpha's elements
  int64_t per_n = 1;   // reduction positions per sample (the shared axes' product)

  // alpha's index of position j of a sample.
  TRAINER_HD_INLINE int64_t alpha_of(int64_t j) const {
    int64_t c = 0, scale = 1;
    for (int k = rank - 1; k >= 0; --k) {
      const int64_t q = j / dims[k], coord = j - q * dims[k];
      j = q;
      if (!shared[k]) {
        c += coord * scale;
        scale *= dims[k];
      }
    }
    return c;
  }
  // The element (flat, over every sample) of reduction position r and alpha index c.
  TRAINER_HD_INLINE int64_t element_of(int64_t r, int64_t c) const {
    const int64_t n = r / per_n;
    r -= n * per_n;
    int64_t j = 0, stride = 1;
    for (int k = rank - 1; k >= 0; --k) {
      int64_t& from = shared[k] ? r : c;
      const int64_t q = from / dims[k];
      j += (from - q * dims[k]) * stride;
      from = q;
      stride *= dims[k];
    }
    return n * sample + j;
  }
};

// The index of a sample shape with the given axes shared (shared[k] for axis k of `dims`), its
// neighbouring axes of the same kind merged into one (host only). Returns false when more than
// kMaxRank axes remain (not for any shape a layer makes: a sample has at most three axes).
inline bool make_index(const std::vector<int64_t>& dims, const std::vector<bool>& shared, Index& out) {
  Index ix;
  for (size_t k = 0; k < dims.size(); ++k) {
    ix.sample *= dims[k];
    (shared[k] ? ix.per_n : ix.alphas) *= dims[k];
    if (ix.rank > 0 && ix.shared[ix.rank - 1] == shared[k]) {
      ix.dims[ix.rank - 1] *= dims[k];
      continue;
    }
    if (ix.rank == kMaxRank) return false;
    ix.dims[ix.rank] = dims[k];
    ix.shared[ix.rank] = shared[k];
    ++ix.rank;
  }
  out = ix;
  return true;
}

}  // namespace trainer::prelu_math
