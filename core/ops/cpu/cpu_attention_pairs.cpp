// The packers of attn_bf16's words in AVX512_BF16: f32 rows rounded by VCVTNEPS2BF16 sixteen at a time, bf16 bits interleaved or transposed as 32-bit words.
#include "core/ops/cpu/cpu_attention_pairs.h"

#include <immintrin.h>

#include <cstring>

#include "core/ops/cpu/cpu_isa_region.h"
#include "core/ops/cpu/cpu_transpose.h"

// Compiled for AVX-512 F and AVX512_BF16 whatever the build's -march; run only where
// attn_bf16_available() (cpu_attention_gemm.h) says the CPU has both.
TRAINER_ISA_BEGIN("avx512f,avx512bf16")

namespace trainer::cpu {
namespace {

__mmask16 lanes(int64_t n) { return first_lanes(n); }

// 16 values of an f32 row from c (0 past n) rounded to bf16, each widened to a 32-bit lane.
__m512i rounded16(const float* row, int64_t n, int64_t c) {
  const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes(n - c), row + c));
  return _mm512_cvtepu16_epi32((__m256i)h);
}

}  // namespace

void pairs_in_rows(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  const int64_t words = pairs(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint32_t* d = dst + r * ldd;
    // 32 values (16 words) at a time: VCVTNE2PS2BF16 puts the second operand's 16 in the low half.
    for (int64_t j = 0; j < words; j += 16) {
      const int64_t c = 2 * j;
      const __m512 lo = _mm512_maskz_loadu_ps(lanes(cols - c), s + c);
      const __m512 hi = _mm512_maskz_loadu_ps(lanes(cols - c - 16), s + c + 16);
      _mm512_mask_storeu_epi32(d + j, lanes(words - j), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

void pairs_in_cols(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  for (int64_t j = 0; 2 * j < rows; ++j) {
    const float* a = src + 2 * j * ld;
    const float* b = 2 * j + 1 < rows ? a + ld : nullptr;
    uint32_t* d = dst + j * ldd;
    for (int64_t c = 0; c < cols; c += 16) {
      __m512i w = rounded16(a, cols, c);
      if (b) w = _mm512_or_si512(w, _mm512_slli_epi32(rounded16(b, cols, c), 16));
      _mm512_mask_storeu_epi32(d + c, lanes(cols - c), w);
    }
  }
}

void bits_in_rows_t(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  // Sixteen rows' sixteen words transposed in registers, stores of sixteen words along dst's rows:
  // a word at a time (its stores 64 words apart) took 5% of gpt_bytes' bf16 step (2026-12-01); a
  // gather of sixteen rows' word was no faster than that.
  const int64_t full = cols / 2;
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t nr = rows - r0 < 16 ? rows - r0 : 16;
    for (int64_t j0 = 0; j0 < full; j0 += 16) {
      const __mmask16 w = lanes(full - j0);
      __m512i v[16];
      for (int64_t r = 0; r < 16; ++r)
        v[r] = r < nr ? _mm512_maskz_loadu_epi32(w, src + (r0 + r) * ld + 2 * j0) : _mm512_setzero_si512();
      transpose16(v);
      const int64_t nw = full - j0 < 16 ? full - j0 : 16;
      for (int64_t j = 0; j < nw; ++j) _mm512_mask_storeu_epi32(dst + (j0 + j) * ldd + r0, lanes(nr), v[j]);
    }
    if (cols % 2)  // the odd last value alone, 0 above it
      for (int64_t r = r0; r < r0 + nr; ++r) dst[full * ldd + r] = src[r * ld + cols - 1];
  }
}

void bits_in_cols(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  for (int64_t j = 0; 2 * j < rows; ++j) {
    const uint16_t* a = src + 2 * j * ld;
    uint32_t* d = dst + j * ldd;
    if (2 * j + 1 < rows) {
      const uint16_t* b = a + ld;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) d[c] = uint32_t(a[c]) | (uint32_t(b[c]) << 16);
    } else {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) d[c] = a[c];
    }
  }
}

}  // namespace trainer::cpu

TRAINER_ISA_END
