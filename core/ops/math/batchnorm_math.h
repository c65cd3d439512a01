// Batch-norm arithmetic shared by the CPU and CUDA kernels: reduction terms, the per-channel finishes (statistics, running statistics, coefficients) and the element formulas.
#pragma once
#include <math.h>

#include "core/ops/math/activation_math.h"
#include "core/ops/math/hd.h"

// x is [m, C] with C last. The algorithm (cpu_batchnorm.cpp, cuda_batchnorm.cu):
//   forward_train  per-channel Σd and Σd² of d = x - shift (shift = x's first row: the one-pass
//                  variance stays accurate when |mean| >> std), then train_stats; y = act(x·a + b)
//   forward_infer  infer_affine from the running statistics, then the same y
//   backward       per-channel Σg and Σg·(x - mean) of g = act'(y)·dy, then grad_coef;
//                  dx = P·g + Q·(x - mean) + R
//   sync_*         (synchronised batch norm) the per-channel finishes of the sums and count every
//                  replica adds up: sync_mean, sync_stats (train_stats of the global sums),
//                  sync_param_grads (a replica's own dgamma, dbeta)
//   backward_apply (synchronised batch norm) apply_coef from all replicas' sums and count
// The finishes and element formulas are one definition for both backends (the CPU's results are
// the ones these expressions always gave). The reduction terms differ by design: the CPU adds
// blocks of 64 rows in float before widening to double (vectorised), the GPU widens every term
// (centred_terms, grad_terms) and adds in the fixed order of column_reduce.h.

namespace trainer::bn {

// --- Fused activation: 0 none, 1 relu, 2 relu6, as a compile-time clamp (act::clamp semantics).

template <int A>
TRAINER_HD_INLINE act::Clamp clamp_for() {
  act::Clamp c;
  if constexpr (A != 0) c.lo = 0.0f;
  if constexpr (A == 2) c.hi = 6.0f;
  return c;
}

template <int A>
TRAINER_HD_INLINE float act_clamp(float v) {
  if constexpr (A == 0) return v;
  else return act::clamp(v, clamp_for<A>());
}

template <int A>
TRAINER_HD_INLINE float act_through(float g, float y) {
  if constexpr (A == 0) return g;
  else return act::through(g, y, clamp_for<A>());
}

// --- Reduction terms (GPU: one element into the double accumulators of column_reduce.h). The
// products are explicit fma so that host (g++ may or may not contract) and device (nvcc
// contracts) round them the same way: the host emulation of the reduction is bit-exact.

// d = x - shift in float, then Σd and Σd².
TRAINER_HD_INLINE void centred_terms(float x, float shift, double (&a)[2]) {
  const double d = double(x - shift);
  a[0] += d;
  a[1] = fma(d, d, a[1]);
}

// Σg and Σg·(x - mean), (x - mean) in float.
TRAINER_HD_INLINE void grad_terms(float g, float x, float mean, double (&a)[2]) {
  a[0] += double(g);
  a[1] = fma(double(g), double(x - mean), a[1]);
}

// --- Per-channel finishes. gamma and beta are 1 and 0 where the layer has none.

struct TrainStats {
  float mean, invstd;  // the batch statistics (biased variance)
  float var;           // the biased variance itself
  float a, b;          // y = x·a + b
  float running_mean, running_var;
};

// The batch variance the running variance averages: the biased `var` itself (Keras 3), or the
// unbiased var·m/(m - 1) (PyTorch, cuDNN; 0 for one row).
TRAINER_HD_INLINE double moving_variance_term(double var, double m, bool unbiased) {
  return !unbiased ? var : m > 1.0 ? var * m / (m - 1.0) : 0.0;
}

// From sum = Σd and sumsq = Σd² over m rows of d = x - shift. The running variance takes
// moving_variance_term of the batch variance; a negative rounding of the variance is taken as 0
// (a NaN stays NaN).
TRAINER_HD_INLINE TrainStats train_stats(double sum, double sumsq, double m, float shift, double gamma, double beta,
                                         double eps, double momentum, float running_mean, float running_var,
                                         bool unbiased) {
  const double dmean = sum / m;
  const double v = sumsq / m - dmean * dmean;
  const double var = v < 0.0 ? 0.0 : v;
  const double mu = double(shift) + dmean;
  const double is = 1.0 / sqrt(var + eps);
  TrainStats s;
  s.mean = float(mu);
  s.invstd = float(is);
  s.var = float(var);
  s.a = float(gamma * is);
  s.b = float(beta - mu * gamma * is);
  s.running_mean = float(momentum * double(running_mean) + (1.0 - momentum) * mu);
  s.running_var = float(momentum * double(running_var) + (1.0 - momentum) * moving_variance_term(var, m, unbiased));
  return s;
}

// An empty batch's saved 1/sqrt(var + eps) (var taken as 0).
TRAINER_HD_INLINE float empty_invstd(float eps) { return 1.0f / sqrtf(eps); }

struct Affine {
  float a, b;  // y = x·a + b
};

// Inference: from the running statistics.
TRAINER_HD_INLINE Affine infer_affine(double gamma, double beta, float running_mean, float running_var, double eps) {
  const double is = 1.0 / sqrt(double(running_var) + eps);
  return {float(gamma * is), float(beta - double(running_mean) * gamma * is)};
}

struct InputGrad {
  float p, q, r;  // dx = p·g + q·(x - mean) + r
};

struct GradCoef {
  float dgamma, dbeta;
  InputGrad dx;
};

// backward, from sum_g = Σg and sum_gxmu = Σg·(x - mean) over this batch's m rows:
// dx = γ·is·(g - Σg/m - x̂·dγ/m), x̂ = (x - mean)·is, dγ = is·Σg(x - mean), dβ = Σg.
TRAINER_HD_INLINE GradCoef grad_coef(double sum_g, double sum_gxmu, float invstd, double gamma, double m) {
  const double db = sum_g, is = invstd, dg = sum_gxmu * is;
  const double p = gamma * is;
  return {float(dg), float(db), {float(p), float(-gamma * is * is * dg / m), float(-p * db / m)}};
}

// backward_apply (synchronised batch norm): the same dx from the sums and row count of all
// replicas: p = γ·is, q = -p·is²·Σdy(x - mean)/count, r = -p·Σdy/count.
TRAINER_HD_INLINE InputGrad apply_coef(double gamma, float invstd, float sum_dy, float sum_dy_xmu, double count) {
  const double is = invstd, p = gamma * is;
  return {float(p), float(-p * is * is * double(sum_dy_xmu) / count), float(-p * double(sum_dy) / count)};
}

// --- Synchronised batch norm (statistics over several replicas' batches): the finishes of the sums
// the replicas add up, on the device, `count` the rows of every replica's batch (a float: exact up
// to 2^24 rows, beyond that rounded as the sums are).

// The mean the second pass centres on: Σx / count (0 for no rows anywhere).
TRAINER_HD_INLINE float sync_mean(float sum, float count) {
  return count > 0.0f ? float(double(sum) / double(count)) : 0.0f;
}

struct SyncStats {
  float mean, invstd, var;  // var: the biased variance normalisation uses (forward_infer's operand)
  float running_mean, running_var;
};

// From Σd and Σd² of d = x - shift over every replica's rows (shift: sync_mean's mean): as
// forward_train's train_stats; no rows anywhere leaves the running statistics alone (as an empty
// batch does) with forward_train's empty statistics.
TRAINER_HD_INLINE SyncStats sync_stats(float sum, float sumsq, float count, float shift, double eps, double momentum,
                                       float running_mean, float running_var, bool unbiased) {
  if (!(count > 0.0f)) return {0.0f, empty_invstd(float(eps)), 0.0f, running_mean, running_var};
  const TrainStats s =
      train_stats(sum, sumsq, count, shift, 1.0, 0.0, eps, momentum, running_mean, running_var, unbiased);
  return {s.mean, s.invstd, s.var, s.running_mean, s.running_var};
}

struct ParamGrads {
  float dgamma, dbeta;
};

// One replica's parameter gradients from its own sums (the gradient all-reduce adds the
// replicas'): dγ = is·Σdy(x - mean), dβ = Σdy, as grad_coef's.
TRAINER_HD_INLINE ParamGrads sync_param_grads(float sum_dy, float sum_dy_xmu, float invstd) {
  return {float(double(sum_dy_xmu) * double(invstd)), sum_dy};
}

// --- Element formulas (then act_clamp / act::clamp for a fused activation; g = act'(y)·dy).

TRAINER_HD_INLINE float normalise(float x, float a, float b) { return x * a + b; }

TRAINER_HD_INLINE float input_grad(float g, float x, float mean, float p, float q, float r) {
  return p * g + q * (x - mean) + r;
}

}  // namespace trainer::bn
