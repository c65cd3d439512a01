// Group-norm indexing shared by the CPU and CUDA kernels: the elements of one (sample, group) of x [N, P, C] (the arithmetic is layernorm_math.h's, a group taken as a row).
#pragma once
#include <cstdint>

#include "core/ops/math/hd.h"
#include "core/ops/math/layernorm_math.h"

// Keras's GroupNormalization over x [N, P, C] (P the positions: an image's pixels, a sequence's
// steps, 1 for a vector) with G groups of Cg = C / G channels: group (n, g) holds the M = P·Cg
// elements x[n, p, g·Cg + j], normalised together as one layer-norm row (ln::RowStats,
// ln::forward, ln::input_grad: sums in double, two passes over x - shift, shift the group's first
// element), then scaled and shifted per channel.

namespace trainer::gn {

struct Shape3 {
  int64_t N, P, C, G;
  TRAINER_HD_INLINE int64_t per_group() const { return C / G; }             // Cg
  TRAINER_HD_INLINE int64_t group_size() const { return P * (C / G); }      // M
  // The offset in x of element m (0 <= m < M, in memory order) of group g of sample n.
  TRAINER_HD_INLINE int64_t at(int64_t n, int64_t g, int64_t m) const {
    const int64_t cg = C / G, p = m / cg;
    return (n * P + p) * C + g * cg + (m - p * cg);
  }
  // The (sample, group) row of the element at `offset`.
  TRAINER_HD_INLINE int64_t row_of(int64_t offset) const { return (offset / (P * C)) * G + (offset % C) / (C / G); }
};

}  // namespace trainer::gn
