// The CPU attention's softmax rows in AVX-512: the row's largest score, one exponential per score summed in double lanes, the probabilities by one multiply; backward's exponentials from the saved log-sum-exp.
#include "core/ops/cpu/cpu_attention_softmax.h"

#include <immintrin.h>

#include <algorithm>

#include "core/ops/cpu/cpu_isa_region.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/attention_math.h"

// Compiled for AVX-512 F whatever the build's -march; run only where attn_softmax_available()
// (below the region's end) says the CPU has it.
TRAINER_ISA_BEGIN("avx512f")

namespace trainer::cpu {
namespace {

// e^x in 16 lanes by cpu::exp_poly's algorithm (cpu_exp.h): n = round(x·log2 e), r = x - n·ln 2 in
// two parts, e^r by its Taylor terms to r^7/5040 in Horner form, times 2^n by VSCALEFPS, which
// rounds a result below 2^-126 to its denormal and one above the range to +inf (exp_poly's exponent
// bits need clamps for both). So: within 2 ulp of e^x down to -87.3, denormals (as libm's) below
// it, 0 below -103.9 and for -inf, +inf above 88.7, NaN for NaN.
inline __m512 exp16(__m512 x) {
  // Within [-104, 89] n stays finite and 2^n·e^r is 0 or +inf where it should be. VMAXPS and VMINPS
  // return their second operand when either is NaN: x second, a NaN flows through to the result.
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 round = _mm512_set1_ps(12582912.0f);  // 1.5·2^23: adding it rounds to an integer
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), round), round);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Lanes [0, n - j) of the 16 from j: the tail's mask.
inline __mmask16 tail(int64_t n, int64_t j) { return first_lanes(n - j); }

}  // namespace

namespace {

// The row's largest score: VMAXPS returns its second operand when either is NaN, so a NaN score
// leaves the running maximum as it is.
float row_max(const float* row, int64_t keys) {
  __m512 mv = _mm512_set1_ps(-__builtin_inff());
  for (int64_t j = 0; j < keys; j += 16) {
    const __mmask16 k = tail(keys, j);
    mv = _mm512_mask_max_ps(mv, k, _mm512_maskz_loadu_ps(k, row + j), mv);
  }
  return _mm512_reduce_max_ps(mv);
}

// e_j = exp(s_j - m) in place; Σ e_j in 16 double lanes (j % 16, masked lanes adding 0), folded by
// a fixed tree.
double row_exp_sum(float* row, int64_t keys, float m) {
  const __m512 mm = _mm512_set1_ps(m);
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (int64_t j = 0; j < keys; j += 16) {
    const __mmask16 k = tail(keys, j);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + j), mm)));
    _mm512_mask_storeu_ps(row + j, k, e);
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

void row_scale(float* row, int64_t keys, float a) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t j = 0; j < keys; j += 16) {
    const __mmask16 k = tail(keys, j);
    _mm512_mask_storeu_ps(row + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row + j), av));
  }
}

}  // namespace

void attn_rows_softmax(float* p, int64_t ld, int64_t n, RowKeys keys, float* lse) {
  // Sixteen rows at a time, each step for all of them before the next: the rows are independent,
  // so one row's maximum, sum, division and logarithm wait on each other no longer (2026-12-01,
  // gpt_bytes' 1-64 keys a row: the row at a time spent half its time waiting on them).
  constexpr int64_t kRows = 16;
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t m = std::min(kRows, n - r0);
    float mx[kRows], inv[kRows];
    double sum[kRows];
    for (int64_t r = 0; r < m; ++r) mx[r] = row_max(p + (r0 + r) * ld, keys.of(r0 + r));
    for (int64_t r = 0; r < m; ++r) sum[r] = row_exp_sum(p + (r0 + r) * ld, keys.of(r0 + r), mx[r]);
    // p_j = e_j / Σe: the largest e is 1, so Σe ≥ 1 (or NaN) and its inverse finite.
    for (int64_t r = 0; r < m; ++r) {
      inv[r] = float(1.0 / sum[r]);
      lse[r0 + r] = attn::lse_of(mx[r], sum[r]);
    }
    for (int64_t r = 0; r < m; ++r) row_scale(p + (r0 + r) * ld, keys.of(r0 + r), inv[r]);
  }
}

float attn_row_softmax(float* row, int64_t keys) {
  float lse;
  attn_rows_softmax(row, keys, 1, RowKeys{keys, 0, keys}, &lse);
  return lse;
}

void attn_row_exp(float* row, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = tail(n, j);
    _mm512_mask_storeu_ps(row + j, k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + j), s)));
  }
}

}  // namespace trainer::cpu

TRAINER_ISA_END

namespace trainer::cpu {

bool attn_softmax_available() { return cpu_has(dnnl::cpu_isa::avx512_core); }

}  // namespace trainer::cpu
