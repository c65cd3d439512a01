// Transposes in AVX-512 registers: sixteen rows of sixteen 32-bit words (attn_bf16's packers, the bf16 transpose below) and bf16 matrices (the dense weight gradient's xᵀ).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace trainer::cpu {

// v[i] lane j = v[j] lane i before: a 16 x 16 matrix of 32-bit words transposed in registers (pairs
// of rows interleaved by 32 then 64 bits, 128-bit quarters gathered twice). AVX-512 F code: called
// only from code compiled for it, run where the CPU has it.
__attribute__((target("avx512f"))) inline void transpose16(__m512i v[16]) {
  __m512i t[16], c[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  // c[4g + k], quarter l: column 4l + k of rows 4g .. 4g + 3.
  for (int g = 0; g < 16; g += 4) {
    c[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    c[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    c[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    c[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512i x = _mm512_shuffle_i32x4(c[k], c[4 + k], 0x88), xo = _mm512_shuffle_i32x4(c[k], c[4 + k], 0xDD);
    const __m512i y = _mm512_shuffle_i32x4(c[8 + k], c[12 + k], 0x88), yo = _mm512_shuffle_i32x4(c[8 + k], c[12 + k], 0xDD);
    v[k] = _mm512_shuffle_i32x4(x, y, 0x88);
    v[8 + k] = _mm512_shuffle_i32x4(x, y, 0xDD);
    v[4 + k] = _mm512_shuffle_i32x4(xo, yo, 0x88);
    v[12 + k] = _mm512_shuffle_i32x4(xo, yo, 0xDD);
  }
}

// dst[c·ldd + r] = src[r·ld + c] for a rows x cols matrix of 16-bit values (bf16 bits), on the
// calling thread's OpenMP team; nothing outside the rows x cols (transposed) is written. Sixteen
// rows' word pairs transposed by transpose16, each word's halves then split into two rows of dst.
// Where transpose_bf16_available() (AVX-512 F and BW) only, as transpose_f32.
void transpose_bf16(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst, int64_t ldd);
// The same for 32-bit values (f32 bits): sixteen by sixteen through transpose16.
void transpose_f32(const float* src, int64_t ld, int64_t rows, int64_t cols, float* dst, int64_t ldd);
bool transpose_bf16_available();
// How many transpose_bf16 calls this process made (all threads): a test's evidence that a kernel
// took the path that transposes.
int64_t transposes_done();

}  // namespace trainer::cpu
