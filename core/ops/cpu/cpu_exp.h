// A vectorisable expf for the CPU kernels' softmax rows (attention's and the cross-entropy's): range reduction by ln 2 and a degree-7 polynomial, within 2 ulp of the correctly rounded value; a row's sum of them in a fixed order.
#pragma once
#include <bit>
#include <cstdint>

namespace trainer::cpu {

// e^x for float x, written so that g++ vectorises a loop of it (`#pragma omp simd`): no call, no
// branch, integer work only in the exponent. x = n·ln2 + r with n = round(x / ln2) and
// |r| ≤ ln2/2 (ln2 in two parts, so r is exact to a few ulp of itself); e^r by its Taylor terms to
// r^7/5040 in Horner form (the truncation, < 1e-8 relative, a tenth of an ulp); 2^n put into the
// exponent bits. Beyond the range: 0 below -87.3 (libm gives denormals down to -103.9: a relative
// error of 1 that no softmax sees, since e^-87 is 2^-126 of the row's largest term), +inf above
// 88.7, NaN for NaN. tests/unit/ops/cpu_exp_test.cpp holds it to 2 ulp of the float64 value over
// the range, every special value included; libm's expf is the reference path beside it.
inline float exp_poly(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;          // ln 2's leading bits (exact products with n)
  constexpr float kLn2Lo = -2.12194440e-4f;       // ln 2 - kLn2Hi
  constexpr float kRound = 12582912.0f;           // 1.5·2^23: adding it rounds to an integer
  const float lo = -87.3f, hi = 88.7f;
  const float xc = x < lo ? lo : (x > hi ? hi : (x != x ? 0.0f : x));  // NaN: its own answer below
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = (int32_t(n) + 127) << 23;  // n in [-126, 128): 2^n normal (n = 128 below)
  // n = 128 (x near 88.7) would overflow the exponent field: 2^127 · 2 instead.
  const float two_n = std::bit_cast<float>(n > 127.0f ? (127 + 127) << 23 : e);
  const float v = p * two_n * (n > 127.0f ? 2.0f : 1.0f);
  return x < lo ? 0.0f : (x > hi ? __builtin_inff() : (x != x ? x : v));
}

// Σ_j e^(x[j] - shift) for j < n in double: exp_poly in float, vectorised, a chunk at a time (one
// loop of both does not vectorise), term j added into double lane j % 8 and the lanes folded in
// order — a fixed order whatever the row's address (a compiler's own reduction would peel an
// unaligned head differently for each), so a row's sum is the same wherever it sits in a batch.
// A softmax row's normaliser.
inline double sum_exp_poly(const float* x, int64_t n, float shift) {
  constexpr int64_t kChunk = 256, kLanes = 8;
  float e[kChunk];
  double lanes[kLanes] = {};
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t m = n - j0 < kChunk ? n - j0 : kChunk;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) e[j] = exp_poly(x[j0 + j] - shift);
    int64_t j = 0;
    for (; j + kLanes <= m; j += kLanes)
#pragma omp simd
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += double(e[j + l]);
    for (; j < m; ++j) lanes[j % kLanes] += double(e[j]);  // kChunk is a multiple of kLanes
  }
  double s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lanes[l];
  return s;
}

}  // namespace trainer::cpu
