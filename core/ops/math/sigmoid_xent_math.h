// Sigmoid cross-entropy's per-sample math, shared by the CPU and CUDA kernels (host and device: plain float/double arithmetic).
#pragma once
#include <cmath>

#include "core/ops/math/hd.h"

namespace trainer::sigmoid_xent {

// Binary cross-entropy of sigmoid(x) against z ∈ {0, 1}, stable for any x:
// max(x, 0) - x·z + log(1 + e^{-|x|}) (TensorFlow's sigmoid_cross_entropy_with_logits), in double.
TRAINER_HD_INLINE double loss(float x, int z) {
  const double v = x;
  return (v > 0 ? v : 0.0) - v * z + log1p(exp(-fabs(v)));
}

// (sigmoid(x) - z) · scale, with e^{-|x|} never overflowing.
TRAINER_HD_INLINE float grad(float x, int z, float scale) {
  const float e = expf(-fabsf(x));
  const float s = x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
  return (s - float(z)) * scale;
}

TRAINER_HD_INLINE bool hit(float x, int z) { return (x > 0.0f) == (z == 1); }

}  // namespace trainer::sigmoid_xent
