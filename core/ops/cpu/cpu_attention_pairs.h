// The bf16 pairs of the CPU attention's AVX512_BF16 products (attn_gemm_bf16's operands), packed from its f32 scratch: two values adjacent along the product's k in one 32-bit word.
#pragma once
#include <cstdint>

#include "core/ops/cpu/cpu_bf16.h"

namespace trainer::cpu {

// The word of (lo, hi), each rounded to bf16 (exact for values that are bf16 already: the head's q,
// k, v and dout; the probabilities and score gradients are rounded here).
inline uint32_t bf16_pair(float lo, float hi) {
  return uint32_t(round_bf16(lo).bits) | (uint32_t(round_bf16(hi).bits) << 16);
}

// src is rows x cols, row-major with stride ld; a value past the edge is 0.
// Pairs along a row, as an A operand: word (r, j) = (src[r][2j], src[r][2j + 1]) at dst[r·ldd + j].
inline void pairs_in_rows(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint32_t* d = dst + r * ldd;
    int64_t j = 0;
    for (; 2 * j + 1 < cols; ++j) d[j] = bf16_pair(s[2 * j], s[2 * j + 1]);
    if (2 * j < cols) d[j] = bf16_pair(s[2 * j], 0.0f);
  }
}
// The same words transposed, as a B operand: word (j, r) at dst[j·ldd + r].
inline void pairs_in_rows_t(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    int64_t j = 0;
    for (; 2 * j + 1 < cols; ++j) dst[j * ldd + r] = bf16_pair(s[2 * j], s[2 * j + 1]);
    if (2 * j < cols) dst[j * ldd + r] = bf16_pair(s[2 * j], 0.0f);
  }
}
// Pairs down a column, as a B operand: word (j, c) = (src[2j][c], src[2j + 1][c]) at dst[j·ldd + c].
inline void pairs_in_cols(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  for (int64_t j = 0; 2 * j < rows; ++j) {
    const float* a = src + 2 * j * ld;
    const float* b = 2 * j + 1 < rows ? a + ld : nullptr;
    uint32_t* d = dst + j * ldd;
    for (int64_t c = 0; c < cols; ++c) d[c] = bf16_pair(a[c], b ? b[c] : 0.0f);
  }
}
// The same words transposed, as an A operand: word (c, j) at dst[c·ldd + j].
inline void pairs_in_cols_t(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd) {
  for (int64_t j = 0; 2 * j < rows; ++j) {
    const float* a = src + 2 * j * ld;
    const float* b = 2 * j + 1 < rows ? a + ld : nullptr;
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + j] = bf16_pair(a[c], b ? b[c] : 0.0f);
  }
}

// Words of a count of values along k.
inline int64_t pairs(int64_t n) { return (n + 1) / 2; }

}  // namespace trainer::cpu
