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

// Whether this CPU runs attn_gemm (AVX-512 F).
bool attn_kernel_available();

}  // namespace trainer::cpu
