// Keras's element-wise merges (Subtract, Average, Maximum, Minimum) at one element, forward and gradient, shared by the CPU and CUDA merge kernels.
#pragma once
#include <cstdint>

#include "core/ops/math/hd.h"

namespace trainer {

enum class MergeMode : int { Subtract, Average, Maximum, Minimum };

namespace merge_math {

constexpr int kMaxInputs = 64;  // inputs of one merge (the CUDA kernels take their pointers by value)

// The input whose value maximum (minimum) passes on at one element, x(i) its value in f32: the
// first to hold the extreme. Keras chains maximum(maximum(x0, x1), x2) ... and TensorFlow's
// gradient of maximum(a, b) goes to a where a >= b, so of equal values the earliest input gets
// the gradient. A NaN is passed on (the first NaN input wins), as torch.maximum does.
template <class Get>
TRAINER_HD_INLINE int pick(MergeMode m, int n, Get x) {
  float best = x(0);
  if (best != best) return 0;
  int w = 0;
  for (int i = 1; i < n; ++i) {
    const float v = x(i);
    if (v != v) return i;
    if (m == MergeMode::Maximum ? v > best : v < best) {
      best = v;
      w = i;
    }
  }
  return w;
}

// The merged value of n inputs at one element, in f32 (the caller rounds it once to its type):
// Subtract x0 − x1; Average (x0 + x1 + ...) / n, summed in input order as Keras's loop of adds,
// then divided; Maximum and Minimum the picked input's value.
template <class Get>
TRAINER_HD_INLINE float forward(MergeMode m, int n, Get x) {
  if (m == MergeMode::Subtract) return x(0) - x(1);
  if (m == MergeMode::Average) {
    float s = x(0);
    for (int i = 1; i < n; ++i) s += x(i);
    return s / float(n);
  }
  return x(pick(m, n, x));
}

// Input i's gradient from dy at one element (w: pick()'s input, for Maximum and Minimum): dy and
// −dy for Subtract, dy / n for each input of Average (the division's gradient), dy for the picked
// input of Maximum and Minimum and 0 for the others.
TRAINER_HD_INLINE float gradient(MergeMode m, int n, int i, int w, float dy) {
  if (m == MergeMode::Subtract) return i == 0 ? dy : -dy;
  if (m == MergeMode::Average) return dy / float(n);
  return i == w ? dy : 0.0f;
}

// The inputs' (and their gradients') element pointers, passed by value to a CUDA kernel.
template <class T>
struct Pointers {
  const T* x[kMaxInputs];
  T* dx[kMaxInputs];  // null: not wanted
  int n;
};

}  // namespace merge_math
}  // namespace trainer
