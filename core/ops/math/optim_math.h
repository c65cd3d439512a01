// Optimizer per-element updates shared by the CPU and CUDA kernels: SGD (momentum, Nesterov), Adam(W), RMSprop, with their per-step coefficients.
#pragma once
#include <math.h>

#include "core/ops/math/hd.h"
#include "core/ops/optim_update.h"

// optim_update.h gives the formulas. Each update is one element's arithmetic in float, the same
// expression on both backends (the CPU compiles it into its vectorised loops; nvcc may contract
// a·b + c into an fma, so the GPU agrees with the CPU to rounding, not to the bit).

namespace trainer::optim_math {

// g' = g·scale + l2·w: the gradient as every update sees it (l2: PyTorch's weight decay, else 0).
TRAINER_HD_INLINE float grad_of(float g, float w, float scale, float l2) { return g * scale + l2 * w; }
// Decoupled weight decay, w - w·wd·lr (Keras's order, optimizers/base_optimizer.py
// _apply_weight_decay; PyTorch's AdamW): Keras on every optimizer, before the update.
TRAINER_HD_INLINE float decayed(float w, float wd, float lr) { return w - w * wd * lr; }

// --- SGD
struct SgdCoef {
  float lr, momentum, wd, scale;
  bool keras;  // Keras's velocity form and decoupled decay; else PyTorch's buffer of gradients and L2
};
inline SgdCoef sgd_coef(const SgdStep& s) {
  return {s.lr, s.momentum, s.weight_decay, s.grad_scale, s.convention == OptimConvention::Keras};
}
// A fixed step whose update the device decided to skip (StepScalars::skip; never for a null step).
TRAINER_HD_INLINE bool skipped(const StepScalars* s) { return s && s->skip != 0; }

// train.ema's element: decay·avg and (1 − decay)·w each rounded to fp32, then their sum — the bits
// of the element-wise passes (scale, scale, accumulate). Never contracted into an fma: __fmul_rn on
// the device; on the host two statements, the caller's loop compiled without contraction
// (cpu_optim_update.cpp).
TRAINER_HD_INLINE float averaged(float avg, float w, float decay, float rest) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(decay, avg) + __fmul_rn(rest, w);
#else
  // Two statements: a compiler that contracts within an expression only (clang's default) rounds
  // each product; g++'s contraction across statements is switched off around the loop.
  const float a = decay * avg;
  const float b = rest * w;
  return a + b;
#endif
}
// Whether the moving average moves: always without a step; in a fixed step, when it averages and
// was not skipped.
TRAINER_HD_INLINE bool averages(const StepScalars* s) { return !s || (s->skip == 0 && s->average != 0); }

// The rate and scale of a StepScalars, when given (read where the update runs).
TRAINER_HD_INLINE SgdCoef with_step(SgdCoef k, const StepScalars* s) {
  if (s) k.lr = s->lr, k.scale = s->grad_scale;
  return k;
}

// Without a velocity (momentum 0): keras w = (w - w·wd·lr) - lr·g'; pytorch w -= lr·(g' + wd·w).
TRAINER_HD_INLINE void sgd(float& w, float g, const SgdCoef& k) {
  if (k.keras) w = decayed(w, k.wd, k.lr) - k.lr * (g * k.scale);
  else w -= k.lr * grad_of(g, w, k.scale, k.wd);
}

// keras (keras/src/optimizers/sgd.py): w = w - w·wd·lr; v = momentum·v - lr·g';
// w += nesterov ? momentum·v - lr·g' : v. The velocity carries the rate it was made with.
// pytorch (torch.optim.SGD): g' += wd·w; v = momentum·v + g'; w -= lr·(nesterov ? g' + momentum·v : v).
TRAINER_HD_INLINE void sgd_momentum(float& w, float& v, float g, const SgdCoef& k, bool nesterov) {
  if (k.keras) {
    const float gi = g * k.scale;
    const float w1 = decayed(w, k.wd, k.lr);
    const float vi = k.momentum * v - k.lr * gi;
    v = vi;
    w = w1 + (nesterov ? k.momentum * vi - k.lr * gi : vi);
    return;
  }
  const float gi = grad_of(g, w, k.scale, k.wd);
  const float vi = k.momentum * v + gi;
  v = vi;
  w -= k.lr * (nesterov ? gi + k.momentum * vi : vi);
}

// --- Adam(W)
struct AdamCoef {
  float lr, b1, b2, eps, scale;
  float l2;        // added to the gradient (PyTorch's Adam weight decay); else 0
  float wd_dec;    // decoupled weight decay, w -= lr·wd_dec·w (Keras's every Adam, AdamW); else 0
  float ib1, ib2;  // pytorch: 1 / bias corrections
  float alpha;     // keras: lr·√bias2 / bias1
  bool keras;
};
// alpha and the inverse corrections from the rate and corrections, the same float operations here
// and in with_step (read from a StepScalars where the update runs), so the same bits.
TRAINER_HD_INLINE float adam_alpha(float lr, float bias1, float bias2) { return lr * sqrtf(bias2) / bias1; }
inline AdamCoef adam_coef(const AdamStep& s) {
  return {s.lr,
          s.beta1,
          s.beta2,
          s.epsilon,
          s.grad_scale,
          s.decoupled ? 0.0f : s.weight_decay,
          s.decoupled ? s.weight_decay : 0.0f,
          1.0f / s.bias1,
          1.0f / s.bias2,
          adam_alpha(s.lr, s.bias1, s.bias2),
          s.convention == OptimConvention::Keras};
}
TRAINER_HD_INLINE AdamCoef with_step(AdamCoef k, const StepScalars* s) {
  if (!s) return k;
  k.lr = s->lr;
  k.scale = s->grad_scale;
  k.ib1 = 1.0f / s->bias1;
  k.ib2 = 1.0f / s->bias2;
  k.alpha = adam_alpha(s->lr, s->bias1, s->bias2);
  return k;
}

// m = b1·m + (1-b1)·g'; v = b2·v + (1-b2)·g'²; w = w - w·wd_dec·lr, then
// keras (keras/src/optimizers/adam.py, the paper's "epsilon hat"): w -= alpha·m / (√v + eps);
// pytorch (torch.optim.Adam/AdamW): w -= lr·(m/bias1) / (√(v/bias2) + eps).
TRAINER_HD_INLINE void adam(float& w, float& m, float& v, float g, const AdamCoef& k) {
  const float w0 = w;
  const float gi = grad_of(g, w0, k.scale, k.l2);
  const float mi = k.b1 * m + (1.0f - k.b1) * gi;
  const float vi = k.b2 * v + (1.0f - k.b2) * gi * gi;
  m = mi;
  v = vi;
  const float w1 = decayed(w0, k.wd_dec, k.lr);
  if (k.keras) w = w1 - mi * k.alpha / (sqrtf(vi) + k.eps);
  else w = w1 - k.lr * (mi * k.ib1) / (sqrtf(vi * k.ib2) + k.eps);
}

// --- RMSprop
struct RmspropCoef {
  float lr, rho, momentum, eps, wd, scale;
  bool keras;
};
inline RmspropCoef rmsprop_coef(const RmspropStep& s) {
  return {s.lr, s.rho, s.momentum, s.epsilon, s.weight_decay, s.grad_scale, s.convention == OptimConvention::Keras};
}
TRAINER_HD_INLINE RmspropCoef with_step(RmspropCoef k, const StepScalars* s) {
  if (s) k.lr = s->lr, k.scale = s->grad_scale;
  return k;
}

// ms = rho·ms + (1-rho)·g'²; centered (mg not null): mg = rho·mg + (1-rho)·g', var = max(ms - mg², 0)
// (>= 0 in exact arithmetic), else var = ms. mom and mg point at this element's state, or are null.
// keras (keras/src/optimizers/rmsprop.py): w = w - w·wd·lr; step = lr·g' / √(var + eps); with
//   momentum mom = momentum·mom + step, w -= mom, else w -= step.
// pytorch (torch.optim.RMSprop): g' = g·scale + wd·w; d = √var + eps; with momentum
//   mom = momentum·mom + g'/d, w -= lr·mom, else w -= lr·g'/d.
TRAINER_HD_INLINE void rmsprop(float& w, float& ms, float* mom, float* mg, float g, const RmspropCoef& k) {
  const float gi = k.keras ? g * k.scale : grad_of(g, w, k.scale, k.wd);
  const float msi = k.rho * ms + (1.0f - k.rho) * gi * gi;
  ms = msi;
  float var = msi;
  if (mg) {
    const float mgi = k.rho * *mg + (1.0f - k.rho) * gi;
    *mg = mgi;
    var = fmaxf(msi - mgi * mgi, 0.0f);
  }
  if (k.keras) {
    const float w1 = decayed(w, k.wd, k.lr);
    const float step = k.lr * gi / sqrtf(var + k.eps);
    if (mom) {
      const float mo = k.momentum * *mom + step;
      *mom = mo;
      w = w1 - mo;
    } else {
      w = w1 - step;
    }
    return;
  }
  const float d = sqrtf(var) + k.eps;
  if (mom) {
    const float mo = k.momentum * *mom + gi / d;
    *mom = mo;
    w -= k.lr * mo;
  } else {
    w -= k.lr * gi / d;
  }
}

}  // namespace trainer::optim_math
