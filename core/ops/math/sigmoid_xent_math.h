// Sigmoid cross-entropy's per-sample math, shared by the CPU and CUDA kernels (host and device: plain float/double arithmetic), with label smoothing.
#pragma once
#include <cmath>

#include "core/ops/math/hd.h"

namespace trainer::sigmoid_xent {

// Label smoothing ls (Keras's binary_crossentropy label_smoothing): the target of label z ∈ {0, 1}
// is z·(1-ls) + 0.5·ls (z itself when ls is 0), in the loss and in the gradient.
TRAINER_HD_INLINE float smooth(int z, float ls) { return ls == 0.0f ? float(z) : float(z) * (1.0f - ls) + 0.5f * ls; }

// Binary cross-entropy of sigmoid(x) against a target t ∈ [0, 1], stable for any x:
// max(x, 0) - x·t + log(1 + e^{-|x|}) (TensorFlow's sigmoid_cross_entropy_with_logits), in double.
TRAINER_HD_INLINE double loss(float x, float t) {
  const double v = x;
  return (v > 0 ? v : 0.0) - v * double(t) + log1p(exp(-fabs(v)));
}

// (sigmoid(x) - t) · scale, with e^{-|x|} never overflowing.
TRAINER_HD_INLINE float grad(float x, float t, float scale) {
  const float e = expf(-fabsf(x));
  const float s = x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
  return (s - t) * scale;
}

TRAINER_HD_INLINE bool hit(float x, int z) { return (x > 0.0f) == (z == 1); }

}  // namespace trainer::sigmoid_xent
