// Gaussian noise of element i as a pure function of (seed, i), shared by the CPU and CUDA noise kernels: Philox words through Box–Muller, in double.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/ops/math/philox.h"

namespace trainer {

// Element i draws philox4x32(counter = i / 4 (64-bit, low word first), 0, 0; key = seed), as
// dropout does; the group's words (w0, w1) give elements 4g and 4g + 1, (w2, w3) elements 4g + 2
// and 4g + 3, by Box–Muller: u1 = ((w_even >> 8) + 1) / 2^24 in (0, 1], u2 = (w_odd >> 8) / 2^24,
// r = sqrt(-2 ln u1), the even element r·cos(2π u2) and the odd one r·sin(2π u2) — a standard
// normal value, computed in double (so the CPU and the GPU round it to float alike, but for the
// last bit of a libm difference) and returned in float.
TRAINER_HD_INLINE float gaussian_noise(const Philox4& r, int j) {
  const uint32_t a = r.v[j & 2], b = r.v[(j & 2) + 1];
  const double u1 = (double(a >> 8) + 1.0) * (1.0 / 16777216.0), u2 = double(b >> 8) * (1.0 / 16777216.0);
  const double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
  return float((j & 1) ? rad * sin(th) : rad * cos(th));
}

// An element's value under the noise: additive (GaussianNoise) x + stddev·z, or multiplicative
// (GaussianDropout) x·(1 + stddev·z); the multiplicative factor is also the gradient's.
TRAINER_HD_INLINE float noise_factor(float z, float stddev) { return 1.0f + stddev * z; }
TRAINER_HD_INLINE float noise_apply(bool multiplicative, float x, float z, float stddev) {
  return multiplicative ? x * noise_factor(z, stddev) : x + stddev * z;
}

}  // namespace trainer
