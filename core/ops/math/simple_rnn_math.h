// SimpleRNN unit arithmetic shared by the CPU and CUDA kernels: one unit's activation and its derivative from the output (Keras's SimpleRNN: tanh, relu, sigmoid or linear).
#pragma once
#include <math.h>

#include "core/ops/math/activation_math.h"
#include "core/ops/math/hd.h"

// h_t = act(x_t·W + b + h_{t-1}·R), h_{-1} = 0. The GEMMs are the backends' own; the per-unit
// activation and its derivative (written from h_t, which backward keeps: tanh 1 − h², relu 1 where
// h > 0 (0 at 0, TensorFlow's), sigmoid h·(1 − h), linear 1) are here, in float.

namespace trainer::simple_rnn_math {

enum class Act : int { Tanh, Relu, Sigmoid, Linear };

TRAINER_HD_INLINE float activate(Act a, float v) {
  switch (a) {
    case Act::Tanh: return tanhf(v);
    case Act::Relu: return v > 0.0f ? v : (v != v ? v : 0.0f);
    case Act::Sigmoid: return act::sigmoid(v);
    default: return v;
  }
}

// dL/d(pre-activation) from dL/dh_t and h_t.
TRAINER_HD_INLINE float pre_grad(Act a, float h, float gh) {
  switch (a) {
    case Act::Tanh: return act::tanh_grad(h, gh);
    case Act::Relu: return h > 0.0f ? gh : 0.0f;
    case Act::Sigmoid: return act::sigmoid_grad(h, gh);
    default: return gh;
  }
}

}  // namespace trainer::simple_rnn_math
