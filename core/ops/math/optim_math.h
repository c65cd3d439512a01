// Optimizer per-element updates shared by the CPU and CUDA kernels: SGD (momentum, Nesterov), Adam(W), RMSprop, with their per-step coefficients.
#pragma once
#include <math.h>

#include "core/ops/math/hd.h"
#include "core/ops/optim_update.h"

// optim_update.h gives the formulas. Each update is one element's arithmetic in float, the same
// expression on both backends (the CPU compiles it into its vectorised loops; nvcc may contract
// a·b + c into an fma, so the GPU agrees with the CPU to rounding, not to the bit).

namespace trainer::optim_math {

// g' = g·scale + wd·w: the gradient as every update sees it.
TRAINER_HD_INLINE float grad_of(float g, float w, float scale, float wd) { return g * scale + wd * w; }

// --- SGD
struct SgdCoef {
  float lr, momentum, wd, scale;
};
inline SgdCoef sgd_coef(const SgdStep& s) { return {s.lr, s.momentum, s.weight_decay, s.grad_scale}; }
// The rate and scale of a StepScalars, when given (read where the update runs).
TRAINER_HD_INLINE SgdCoef with_step(SgdCoef k, const StepScalars* s) {
  if (s) k.lr = s->lr, k.scale = s->grad_scale;
  return k;
}

// Without a velocity (momentum 0): w -= lr·g'.
TRAINER_HD_INLINE void sgd(float& w, float g, const SgdCoef& k) { w -= k.lr * grad_of(g, w, k.scale, k.wd); }

// v = momentum·v + g'; w -= lr·(nesterov ? g' + momentum·v : v).
TRAINER_HD_INLINE void sgd_momentum(float& w, float& v, float g, const SgdCoef& k, bool nesterov) {
  const float gi = grad_of(g, w, k.scale, k.wd);
  const float vi = k.momentum * v + gi;
  v = vi;
  w -= k.lr * (nesterov ? gi + k.momentum * vi : vi);
}

// --- Adam(W)
struct AdamCoef {
  float lr, b1, b2, eps, scale;
  float l2;        // added to the gradient (Adam's weight decay); 0 for AdamW
  float dec;       // AdamW: w -= lr·wd·w; 0 for Adam
  float ib1, ib2;  // 1 / bias corrections
  float wd_dec;    // AdamW's weight decay (dec = lr·wd_dec); 0 for Adam
};
inline AdamCoef adam_coef(const AdamStep& s) {
  return {s.lr,
          s.beta1,
          s.beta2,
          s.epsilon,
          s.grad_scale,
          s.decoupled ? 0.0f : s.weight_decay,
          s.decoupled ? s.lr * s.weight_decay : 0.0f,
          1.0f / s.bias1,
          1.0f / s.bias2,
          s.decoupled ? s.weight_decay : 0.0f};
}
// The rate, scale and bias corrections of a StepScalars, when given (the same float operations
// as adam_coef, so the same bits).
TRAINER_HD_INLINE AdamCoef with_step(AdamCoef k, const StepScalars* s) {
  if (!s) return k;
  k.lr = s->lr;
  k.scale = s->grad_scale;
  k.dec = s->lr * k.wd_dec;
  k.ib1 = 1.0f / s->bias1;
  k.ib2 = 1.0f / s->bias2;
  return k;
}

// m = b1·m + (1-b1)·g'; v = b2·v + (1-b2)·g'²; w = w - dec·w - lr·(m/bias1) / (sqrt(v/bias2) + eps).
TRAINER_HD_INLINE void adam(float& w, float& m, float& v, float g, const AdamCoef& k) {
  const float w0 = w;
  const float gi = grad_of(g, w0, k.scale, k.l2);
  const float mi = k.b1 * m + (1.0f - k.b1) * gi;
  const float vi = k.b2 * v + (1.0f - k.b2) * gi * gi;
  m = mi;
  v = vi;
  w = w0 - k.dec * w0 - k.lr * (mi * k.ib1) / (sqrtf(vi * k.ib2) + k.eps);
}

// --- RMSprop (Keras)
struct RmspropCoef {
  float lr, rho, momentum, eps, wd, scale;
};
inline RmspropCoef rmsprop_coef(const RmspropStep& s) {
  return {s.lr, s.rho, s.momentum, s.epsilon, s.weight_decay, s.grad_scale};
}
TRAINER_HD_INLINE RmspropCoef with_step(RmspropCoef k, const StepScalars* s) {
  if (s) k.lr = s->lr, k.scale = s->grad_scale;
  return k;
}

// ms = rho·ms + (1-rho)·g'²; centered (mg not null): mg = rho·mg + (1-rho)·g', var = max(ms - mg², 0),
// else var = ms; step = lr·g' / (sqrt(var) + eps); with momentum (mom not null) mom = momentum·mom
// + step, w -= mom, else w -= step. mom and mg point at this element's state, or are null.
TRAINER_HD_INLINE void rmsprop(float& w, float& ms, float* mom, float* mg, float g, const RmspropCoef& k) {
  const float gi = grad_of(g, w, k.scale, k.wd);
  const float msi = k.rho * ms + (1.0f - k.rho) * gi * gi;
  ms = msi;
  float var = msi;
  if (mg) {
    const float mgi = k.rho * *mg + (1.0f - k.rho) * gi;
    *mg = mgi;
    var = fmaxf(msi - mgi * mgi, 0.0f);  // >= 0 in exact arithmetic
  }
  const float step = k.lr * gi / (sqrtf(var) + k.eps);
  if (mom) {
    const float mo = k.momentum * *mom + step;
    *mom = mo;
    w -= mo;
  } else {
    w -= step;
  }
}

}  // namespace trainer::optim_math
