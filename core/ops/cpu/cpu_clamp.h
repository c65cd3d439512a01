// ReLU and ReLU6 as clamps, with their derivative from the output: one definition for the activation kernel and batch norm's fused activation.
#pragma once
#include <limits>

#include "core/ops/activation.h"

namespace trainer::cpu {

// The output clamped to [lo, hi]: relu [0, inf), relu6 [0, 6]; any other kind is unbounded.
struct Clamp {
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
};

inline Clamp clamp_of(ActKind k) {
  Clamp c;
  if (k == ActKind::Relu || k == ActKind::Relu6) c.lo = 0.0f;
  if (k == ActKind::Relu6) c.hi = 6.0f;
  return c;
}

// Selects, not fmin/fmax, so that loops over them vectorise; a NaN becomes lo.
inline float clamp(float v, Clamp c) { return v > c.lo ? (v < c.hi ? v : c.hi) : c.lo; }
// The gradient through the clamp, from its output y: dy passes where lo < y < hi (the derivative at
// the bounds is taken as 0, as TF and PyTorch; 0 < y < 6 exactly where 0 < x < 6).
inline float through(float dy, float y, Clamp c) { return y > c.lo && y < c.hi ? dy : 0.0f; }

}  // namespace trainer::cpu
