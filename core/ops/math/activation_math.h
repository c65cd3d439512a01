// Element-wise activation math shared by the CPU and CUDA kernels: ReLU/ReLU6 as clamps, sigmoid, tanh, and each derivative taken from the output.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <stdexcept>

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

// Selects, not fmin/fmax, so that CPU loops over them vectorise. A NaN stays NaN (as PyTorch's
// relu/hardtanh, TF's and JAX's): a diverged activation must reach the loss, not become lo.
TRAINER_HD_INLINE float clamp(float v, Clamp c) { return v > c.lo ? (v < c.hi ? v : c.hi) : (v != v ? v : c.lo); }

// The gradient through the clamp, from its output y: dy passes where lo < y < hi (the derivative at
// the bounds is taken as 0, as TF and PyTorch; 0 < y < 6 exactly where 0 < x < 6, and a ReLU
// output of +inf passes nothing).
TRAINER_HD_INLINE float through(float dy, float y, Clamp c) { return y > c.lo && y < c.hi ? dy : 0.0f; }

// The gate of `through` decided from the value v before the clamp and a rounding store, without
// rounding: returns (lo', hi') such that lo' < v < hi' exactly when y = round(clamp(v, c)) has
// lo < y < hi (a NaN passes neither). `round` is the store's round trip (f32 -> bf16 -> f32); it
// must be monotonic and keep c's bounds (0, 6 and the infinities are exact in bf16 and f16), else
// std::invalid_argument. For the identity, (lo, hi). Host code: a binary search over the floats.
namespace detail {
// The non-NaN floats in increasing order as unsigned keys, and back.
inline uint32_t float_key(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline float key_float(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float v;
  memcpy(&v, &u, 4);
  return v;
}
// The first float f (in [-inf, inf]) with p(f), p false then true as f grows; +inf when none.
template <class P>
float first_float(P p) {
  uint32_t lo = float_key(-HUGE_VALF), hi = float_key(HUGE_VALF);
  if (p(-HUGE_VALF)) return -HUGE_VALF;
  if (!p(HUGE_VALF)) return HUGE_VALF;
  while (hi - lo > 1) {  // p(lo) false, p(hi) true
    const uint32_t mid = lo + (hi - lo) / 2;
    (p(key_float(mid)) ? hi : lo) = mid;
  }
  return key_float(hi);
}
}  // namespace detail

inline Clamp rounded_gate(Clamp c, float (*round)(float)) {
  if (!(round(c.lo) == c.lo) || !(round(c.hi) == c.hi))
    throw std::invalid_argument("rounded_gate: the clamp's bounds must survive the rounding");
  Clamp g;
  // lo' = the last float whose rounding is <= lo, i.e. the one before the first rounding above lo.
  const float above = detail::first_float([&](float f) { return round(f) > c.lo; });
  const bool none_above = !(round(HUGE_VALF) > c.lo);  // lo = +inf: every float rounds to <= lo
  g.lo = none_above ? HUGE_VALF : detail::key_float(detail::float_key(above) - 1);
  // hi' = the first float whose rounding is >= hi.
  g.hi = detail::first_float([&](float f) { return round(f) >= c.hi; });
  return g;
}

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

// GELU, exact: x Φ(x) = x/2 (1 + erf(x/√2)); its derivative Φ(x) + x φ(x), from x.
TRAINER_HD_INLINE float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
TRAINER_HD_INLINE float gelu_grad(float x, float dy) {
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  const float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}
// GELU, tanh form: x/2 (1 + tanh(u)), u = √(2/π) (x + 0.044715 x³); its derivative
// (1 + t)/2 + x/2 (1 - t²) √(2/π) (1 + 3·0.044715 x²), t = tanh(u), from x.
TRAINER_HD_INLINE float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
TRAINER_HD_INLINE float gelu_tanh_grad(float x, float dy) {
  const float t = tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x));
  const float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

// SiLU (swish): x·sigmoid(x); its derivative s·(1 + x·(1 - s)), s = sigmoid(x), from x.
TRAINER_HD_INLINE float silu(float x) { return x * sigmoid(x); }
TRAINER_HD_INLINE float silu_grad(float x, float dy) {
  const float s = sigmoid(x);
  return dy * (s * (1.0f + x * (1.0f - s)));
}

}  // namespace trainer::act
