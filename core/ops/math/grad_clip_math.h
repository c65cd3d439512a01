// Gradient clipping's arithmetic shared by the CPU and CUDA kernels: the sum of squares in one fixed order (bit-identical on both) and the per-element clamp.
#pragma once
#include <math.h>
#include <stdint.h>

#include "core/ops/math/hd.h"

namespace trainer::grad_clip_math {

// The sum of squares of n floats is taken chunk by chunk: chunk c is kLanes lanes, lane l summing
// x[c·kChunk + r·kLanes + l] for r = 0 .. kRounds-1 in order (absent elements add nothing), then
// the lanes folded pairwise (l += l + s for s = kLanes/2 .. 1); the chunks' sums are then added in
// chunk order on the host. Each square of a float is exact in double, so a fused multiply-add
// rounds as a multiply then an add does: the CPU (a loop over lanes) and the GPU (a block of
// kLanes threads per chunk) give the same bits, independent of the thread count.
constexpr int kLanes = 256;
constexpr int kRounds = 64;
constexpr int64_t kChunk = int64_t(kLanes) * kRounds;

inline int64_t chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }

TRAINER_HD_INLINE double square(float v) { return double(v) * double(v); }

// Folds lanes[0 .. kLanes) into lanes[0] in the fixed pairwise order (the CPU's; the GPU's block
// does the same steps in shared memory).
inline double fold(double* lanes) {
  for (int s = kLanes / 2; s > 0; s /= 2)
    for (int l = 0; l < s; ++l) lanes[l] += lanes[l + s];
  return lanes[0];
}

// Chunk c's sum of squares of x[0, n) (the CPU's loop; the GPU's block computes the same bits).
inline double chunk_sum_squares(const float* x, int64_t n, int64_t c) {
  double lanes[kLanes] = {};
  const int64_t base = c * kChunk;
  for (int r = 0; r < kRounds; ++r) {
    const int64_t at = base + int64_t(r) * kLanes;
    const int64_t m = n - at < kLanes ? n - at : kLanes;
    for (int64_t l = 0; l < m; ++l) lanes[l] += square(x[at + l]);
  }
  return fold(lanes);
}

// One gradient element unscaled (× scale) and clipped to [-limit, limit] (Keras's clipvalue,
// torch.nn.utils.clip_grad_value_). NaN stays NaN.
TRAINER_HD_INLINE float clip_value(float g, float scale, float limit) {
  const float v = g * scale;
  return v > limit ? limit : (v < -limit ? -limit : v);
}

}  // namespace trainer::grad_clip_math
