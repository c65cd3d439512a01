// The bf16 pairs of the CPU attention's AVX512_BF16 products (attn_gemm_bf16's operands): two values adjacent along the product's k in one 32-bit word, packed from f32 scratch (rounded) or from the bf16 tensors' bits (copied).
#pragma once
#include <cstdint>

namespace trainer::cpu {

// AVX512_BF16 code (cpu_attention_pairs.cpp): called only where attn_bf16_available().
//
// From f32 rows, each value rounded to bf16 by VCVTNEPS2BF16 (to nearest even; a value below
// 2^-126 becomes 0, as VDPBF16PS would take it: the products are the same as with the rounding
// that keeps it). src is rows x cols, row stride ld; a value past the edge is 0.
// Pairs along a row, as an A operand: word (r, j) = (src[r][2j], src[r][2j + 1]) at dst[r·ldd + j].
void pairs_in_rows(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd);
// Pairs down a column: word (j, c) = (src[2j][c], src[2j + 1][c]) at dst[j·ldd + c] (a B operand,
// or, read with row stride 1 and column stride ldd, the transposed A operand of xᵀ·y).
void pairs_in_cols(const float* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd);

// From bf16 rows (the bits of the head's k or v in its tensor, row stride ld), copied: no rounding.
// Pairs along a row, transposed, as a B operand: word (j, r) = (src[r][2j], src[r][2j + 1]) at
// dst[j·ldd + r].
void bits_in_rows_t(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd);
// Pairs down a column, as a B operand: word (j, c) = (src[2j][c], src[2j + 1][c]) at dst[j·ldd + c].
void bits_in_cols(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst, int64_t ldd);

// Words of a count of values along k.
inline int64_t pairs(int64_t n) { return (n + 1) / 2; }

}  // namespace trainer::cpu
