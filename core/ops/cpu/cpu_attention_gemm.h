// The products inside CPU attention by an AVX-512 micro-kernel (FastPath::AttnKernel): small row-major GEMMs accumulated in registers, no packing, no call overhead; sgemm is the path beside it.
#pragma once
#include <cstdint>

namespace trainer::cpu {

// A's element (i, k) at p[i·row + k·col]: a row-major matrix (row = lda, col = 1) or a transposed
// one (row = 1, col = lda), read one element at a time (broadcast).
struct AttnOperand {
  const float* p;
  int64_t row, col;
};

// C[M, N] = alpha·(A[M, K]·B[K, N]), plus C's old value when `add` (C row-major with ldc, B
// row-major with ldb, its rows read as vectors). Each element is its k-ordered sum of products by
// fused multiply-adds from 0, then times alpha (alpha 1: as is), then added to C: the same bits
// whatever runs around it (attention calls it on one thread per (batch, head)). AVX-512 only:
// callers ask attn_kernel_available() (cpu_attention.cpp falls back to sgemm without it).
void attn_gemm(int64_t M, int64_t N, int64_t K, AttnOperand A, const float* B, int64_t ldb, float* C, int64_t ldc,
               float alpha, bool add);

// The same product on bf16 (AVX512_BF16 dot products, the attn_bf16 path): A [M, K2] and B [K2, N]
// of 32-bit words, each two bf16 values adjacent along k (A's word (m, j): a[m][2j] in its low half,
// a[m][2j + 1] in its high half; B's word (j, n): b[2j][n], b[2j + 1][n]), K2 = ⌈K/2⌉ (an odd K's
// last word's high half 0 in A), A's word (m, j) at p[m·row + j·col] (row-major, or transposed:
// row 1). Each VDPBF16PS adds a word pair's two products (exact: 8-bit significands) to the f32
// accumulator, in k order; values below 2^-126 are taken as 0 (the instruction's rule). C as
// attn_gemm's.
struct AttnWords {
  const uint32_t* p;
  int64_t row, col;
};
void attn_gemm_bf16(int64_t M, int64_t N, int64_t K2, AttnWords A, const uint32_t* B, int64_t ldb, float* C,
                    int64_t ldc, float alpha, bool add);

// Whether this CPU runs attn_gemm (AVX-512 F), and attn_gemm_bf16 (AVX512_BF16 too).
bool attn_kernel_available();
bool attn_bf16_available();

}  // namespace trainer::cpu
