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

// Keras 3's other activations (keras.activations), each y = f(x) in float with its derivative:
// leaky_relu's from y (y > 0 exactly where x > 0, the slope being >= 0: it runs in place, as relu),
// the others' from x (backward_reads_x). Each formula as Keras 3 writes it (relu6(x + 3) / 6, not
// x / 6 + 0.5), with TensorFlow's derivative at the kinks (relu6's gate 0 at its bounds, leaky_relu's
// and elu's the negative side's at 0).
TRAINER_HD_INLINE float leaky_relu(float x, float slope) { return x > 0.0f ? x : slope * x; }
TRAINER_HD_INLINE float leaky_relu_grad(float y, float slope, float dy) { return y > 0.0f ? dy : slope * dy; }

TRAINER_HD_INLINE float elu(float x, float alpha) { return x > 0.0f ? x : alpha * expm1f(x); }
TRAINER_HD_INLINE float elu_grad(float x, float alpha, float dy) { return x > 0.0f ? dy : dy * (alpha * expf(x)); }

// SELU: scale·elu(x, alpha) with Keras's (Klambauer et al.'s) constants (activation.h).
TRAINER_HD_INLINE float selu(float x) { return kSeluScale * elu(x, kSeluAlpha); }
TRAINER_HD_INLINE float selu_grad(float x, float dy) {
  return x > 0.0f ? dy * kSeluScale : dy * (kSeluScale * kSeluAlpha * expf(x));
}

// softplus: log(1 + e^x) as max(x, 0) + log1p(e^-|x|) (no overflow); its derivative sigmoid(x).
TRAINER_HD_INLINE float softplus(float x) { return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x))); }
TRAINER_HD_INLINE float softplus_grad(float x, float dy) { return dy * sigmoid(x); }

// hard_sigmoid: relu6(x + 3) / 6 (Keras 3's; Keras 2's was clip(0.2x + 0.5, 0, 1)); hard_silu
// (hard_swish): x · hard_sigmoid(x).
TRAINER_HD_INLINE float hard_sigmoid(float x) { return clamp(x + 3.0f, Clamp{0.0f, 6.0f}) / 6.0f; }
TRAINER_HD_INLINE float hard_sigmoid_grad(float x, float dy) {
  const float v = x + 3.0f;
  return v > 0.0f && v < 6.0f ? dy / 6.0f : 0.0f;
}
TRAINER_HD_INLINE float hard_silu(float x) { return x * hard_sigmoid(x); }
TRAINER_HD_INLINE float hard_silu_grad(float x, float dy) {
  const float v = x + 3.0f, h = hard_sigmoid(x);
  return dy * (v > 0.0f && v < 6.0f ? h + x / 6.0f : h);
}

// mish: x · tanh(softplus(x)); its derivative t + x·sigmoid(x)·(1 - t²), t = tanh(softplus(x)).
TRAINER_HD_INLINE float mish(float x) { return x * tanhf(softplus(x)); }
TRAINER_HD_INLINE float mish_grad(float x, float dy) {
  const float t = tanhf(softplus(x));
  return dy * (t + x * sigmoid(x) * (1.0f - t * t));
}

// Each kind's formula as a functor, one type per kind (the backends' loops see a formula without a
// branch on the kind): operator()(x) is y = f(x), grad(v, dy) the derivative from v (y where
// backward_reads_y, else x); alpha is ActivationParams::alpha (leaky_relu's slope, elu's alpha).
// The kernels of every backend take them through with_formula.
#define TRAINER_ACT_FORMULA(Name, fwd, bwd)                                      \
  struct Name {                                                                  \
    float alpha;                                                                 \
    TRAINER_HD_INLINE float operator()(float x) const { return fwd; }            \
    TRAINER_HD_INLINE float grad(float v, float dy) const { return bwd; }        \
  };
TRAINER_ACT_FORMULA(ReluF, clamp(x, Clamp{0.0f, HUGE_VALF}), through(dy, v, Clamp{0.0f, HUGE_VALF}))
TRAINER_ACT_FORMULA(Relu6F, clamp(x, Clamp{0.0f, 6.0f}), through(dy, v, Clamp{0.0f, 6.0f}))
TRAINER_ACT_FORMULA(SigmoidF, sigmoid(x), sigmoid_grad(v, dy))
TRAINER_ACT_FORMULA(TanhF, tanh_of(x), tanh_grad(v, dy))
TRAINER_ACT_FORMULA(GeluF, gelu(x), gelu_grad(v, dy))
TRAINER_ACT_FORMULA(GeluTanhF, gelu_tanh(x), gelu_tanh_grad(v, dy))
TRAINER_ACT_FORMULA(SiluF, silu(x), silu_grad(v, dy))
TRAINER_ACT_FORMULA(LeakyReluF, leaky_relu(x, alpha), leaky_relu_grad(v, alpha, dy))
TRAINER_ACT_FORMULA(EluF, elu(x, alpha), elu_grad(v, alpha, dy))
TRAINER_ACT_FORMULA(SeluF, selu(x), selu_grad(v, dy))
TRAINER_ACT_FORMULA(SoftplusF, softplus(x), softplus_grad(v, dy))
TRAINER_ACT_FORMULA(HardSigmoidF, hard_sigmoid(x), hard_sigmoid_grad(v, dy))
TRAINER_ACT_FORMULA(HardSiluF, hard_silu(x), hard_silu_grad(v, dy))
TRAINER_ACT_FORMULA(MishF, mish(x), mish_grad(v, dy))
#undef TRAINER_ACT_FORMULA

// Calls f(functor) with kind k's functor (above); linear has none (the kernels copy). Host code.
template <class F>
void with_formula(ActKind k, float alpha, F&& f) {
  switch (k) {
    case ActKind::Linear: throw std::logic_error("with_formula: linear has no formula (a copy)");
    case ActKind::Relu: return f(ReluF{alpha});
    case ActKind::Relu6: return f(Relu6F{alpha});
    case ActKind::Sigmoid: return f(SigmoidF{alpha});
    case ActKind::Tanh: return f(TanhF{alpha});
    case ActKind::Gelu: return f(GeluF{alpha});
    case ActKind::GeluTanh: return f(GeluTanhF{alpha});
    case ActKind::Silu: return f(SiluF{alpha});
    case ActKind::LeakyRelu: return f(LeakyReluF{alpha});
    case ActKind::Elu: return f(EluF{alpha});
    case ActKind::Selu: return f(SeluF{alpha});
    case ActKind::Softplus: return f(SoftplusF{alpha});
    case ActKind::HardSigmoid: return f(HardSigmoidF{alpha});
    case ActKind::HardSilu: return f(HardSiluF{alpha});
    case ActKind::Mish: return f(MishF{alpha});
  }
  throw std::logic_error("with_formula: unknown activation kind");
}

// The derivative functor of F, for the backends' two-operand maps: o = grad(v, dy).
template <class F>
struct GradOf {
  F f;
  TRAINER_HD_INLINE float operator()(float v, float dy) const { return f.grad(v, dy); }
};

}  // namespace trainer::act
