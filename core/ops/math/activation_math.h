// Element-wise activation math shared by the CPU and CUDA kernels: ReLU/ReLU6 as clamps, sigmoid, tanh, and each derivative taken from the output.
#pragma once
#include <math.h>

#include "core/ops/activation.h"
#include "core/ops/math/hd.h"

// Used by the activation kernels (cpu_activation.cpp, cuda_activation.cu), by batch norm's fused
// ReLU/ReLU6 (cpu_batchnorm.cpp, batchnorm_math.h) and by the LSTM gates (lstm_math.h). Every
// formula is plain float arithmetic, the same expression on both sides.

namespace trainer::act {

// The output clamped to [lo, hi]: relu [0, inf), relu6 [0, 6]; any other kind is unbounded.
struct Clamp {
  float lo = -HUGE_VALF, hi = HUGE_VALF;
};

inline Clamp clamp_of(ActKind k) {
  Clamp c;
  if (k == ActKind::Relu || k == ActKind::Relu6) c.lo = 0.0f;
  if (k == ActKind::Relu6) c.hi = 6.0f;
  return c;
}

// Selects, not fmin/fmax, so that CPU loops over them vectorise; a NaN becomes lo.
TRAINER_HD_INLINE float clamp(float v, Clamp c) { return v > c.lo ? (v < c.hi ? v : c.hi) : c.lo; }

// The gradient through the clamp, from its output y: dy passes where lo < y < hi (the derivative at
// the bounds is taken as 0, as TF and PyTorch; 0 < y < 6 exactly where 0 < x < 6, and a ReLU
// output of +inf passes nothing).
TRAINER_HD_INLINE float through(float dy, float y, Clamp c) { return y > c.lo && y < c.hi ? dy : 0.0f; }

// Numerically safe for any x: exp only ever sees -|x|, so it never overflows.
TRAINER_HD_INLINE float sigmoid(float x) {
  const float e = expf(-fabsf(x));
  const float s = 1.0f / (1.0f + e);
  return x >= 0.0f ? s : 1.0f - s;
}

// dx from y = sigmoid(x): dy·y·(1 - y).
TRAINER_HD_INLINE float sigmoid_grad(float y, float dy) { return dy * y * (1.0f - y); }

TRAINER_HD_INLINE float tanh_of(float x) { return tanhf(x); }

// dx from y = tanh(x): dy·(1 - y²).
TRAINER_HD_INLINE float tanh_grad(float y, float dy) { return dy * (1.0f - y * y); }

}  // namespace trainer::act
