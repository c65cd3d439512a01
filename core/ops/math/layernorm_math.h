// Layer-norm arithmetic shared by the CPU and CUDA kernels: a row's statistics from its sums, and the forward and input-gradient element formulas.
#pragma once
#include <math.h>

#include "core/ops/math/hd.h"

// x is [rows, C], normalised over each row (Keras LayerNormalization, axis -1):
//   mean = Σx / C,  var = Σ(x - mean)² / C (biased),  rstd = 1 / sqrt(var + eps)
//   y    = (x - mean)·rstd·gamma + beta
// Backward, with x̂ = (x - mean)·rstd and g = dy·gamma (gamma 1 without scale):
//   dx     = rstd·(g - Σg / C - x̂·Σ(g·x̂) / C)
//   dgamma = Σ over rows of dy·x̂,  dbeta = Σ over rows of dy
// The CUDA kernels compute the statistics again from x in backward; the CPU's forward keeps them
// for it where the layer asks (LayerNormKernel::keeps_stats: the layer holds them, one per
// micro-batch graph), the same floats either way. Row sums are in double on
// both backends, two passes (the mean, then the centred squares), over d = x - shift with shift
// the row's first element (exact in float for values near it, as batchnorm_math.h's shift): a row
// whose |mean| is far larger than its spread (1000 ± 0.01) keeps its x̂ to float precision, where
// x - float(mean) would lose it to mean's rounding (an error of ulp(1000)/2 · rstd = 1e-2 in x̂).

namespace trainer::ln {

// rstd from the row's centred sum of squares.
TRAINER_HD_INLINE float rstd_of(double centred_sq_sum, int64_t C, float eps) {
  return float(1.0 / sqrt(centred_sq_sum / double(C) + double(eps)));
}

// A row's statistics: x̂ = ((x - shift) - mean)·rstd, mean that of x - shift.
struct RowStats {
  float shift, mean, rstd;
};

TRAINER_HD_INLINE float normalise(float x, const RowStats& s) { return ((x - s.shift) - s.mean) * s.rstd; }

TRAINER_HD_INLINE float forward(float x, const RowStats& s, float gamma, float beta) {
  return fmaf(normalise(x, s), gamma, beta);
}

// dx of one element from its g = dy·gamma and x̂, and the row's means of g and g·x̂.
TRAINER_HD_INLINE float input_grad(float g, float xhat, float mean_g, float mean_gx, float rstd) {
  return rstd * (g - mean_g - xhat * mean_gx);
}

}  // namespace trainer::ln
