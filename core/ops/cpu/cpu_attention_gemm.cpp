// The AVX-512 micro-kernel of CPU attention's products: tiles of up to 8 rows by 32 columns of C, each accumulated over K in 16 registers from broadcast A elements and vector rows of B.
#include "core/ops/cpu/cpu_attention_gemm.h"

#include <immintrin.h>

#include "core/ops/cpu/cpu_util.h"

// Compiled for AVX-512 F whatever the build's -march; run only where attn_kernel_available() (below
// the pragma's end) says the CPU has it.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif

namespace trainer::cpu {
namespace {

// Columns [n0, n0 + 16·V) of rows [m0, m0 + R) of C (lanes past N masked off by m[0], m[1]); A
// row-major (kTransposed false: A.col == 1) or transposed (A.row == 1). The accumulators are named
// registers: an array of them made g++ store every one to the stack at each k.
template <int R, int V, bool kTransposed>
void tile(int64_t K, AttnOperand A, int64_t m0, const float* B, int64_t ldb, int64_t n0, float* C, int64_t ldc,
          const __mmask16 (&m)[2], float alpha, bool add) {
  static_assert(R >= 1 && R <= 8 && (V == 1 || V == 2));
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  const int64_t sr = kTransposed ? 1 : A.row, sk = kTransposed ? A.col : 1;
  const float* a = A.p + m0 * sr;
  const float* b = B + n0;
  const __mmask16 m0k = m[0], m1k = m[1];
  for (int64_t k = 0; k < K; ++k, a += sk, b += ldb) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0k, b);
    const __m512 b1 = V == 2 ? _mm512_maskz_loadu_ps(m1k, b + 16) : b0;
#define TRAINER_ROW(r, x0, x1)                                 \
  if constexpr (R > r) {                                        \
    const __m512 ar = _mm512_set1_ps(a[r * sr]);                \
    x0 = _mm512_fmadd_ps(ar, b0, x0);                           \
    if constexpr (V == 2) x1 = _mm512_fmadd_ps(ar, b1, x1);     \
  }
    TRAINER_ROW(0, c00, c01)
    TRAINER_ROW(1, c10, c11)
    TRAINER_ROW(2, c20, c21)
    TRAINER_ROW(3, c30, c31)
    TRAINER_ROW(4, c40, c41)
    TRAINER_ROW(5, c50, c51)
    TRAINER_ROW(6, c60, c61)
    TRAINER_ROW(7, c70, c71)
#undef TRAINER_ROW
  }
  const __m512 acc[8][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                            {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
  const __m512 al = _mm512_set1_ps(alpha);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      float* c = C + (m0 + r) * ldc + n0 + 16 * v;
      __m512 y = alpha == 1.0f ? acc[r][v] : _mm512_mul_ps(acc[r][v], al);
      if (add) y = _mm512_add_ps(_mm512_maskz_loadu_ps(m[v], c), y);
      _mm512_mask_storeu_ps(c, m[v], y);
    }
}

// Rows [m0, M) in tiles of 8 (the last of M % 8 rows), columns [n0, n0 + 16·V).
template <int V, bool kT>
void columns(int64_t M, int64_t K, AttnOperand A, const float* B, int64_t ldb, int64_t n0, float* C, int64_t ldc,
             const __mmask16 (&m)[2], float alpha, bool add) {
  int64_t m0 = 0;
  for (; m0 + 8 <= M; m0 += 8) tile<8, V, kT>(K, A, m0, B, ldb, n0, C, ldc, m, alpha, add);
  switch (M - m0) {
    case 7: return tile<7, V, kT>(K, A, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 6: return tile<6, V, kT>(K, A, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 5: return tile<5, V, kT>(K, A, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 4: return tile<4, V, kT>(K, A, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 3: return tile<3, V, kT>(K, A, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 2: return tile<2, V, kT>(K, A, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 1: return tile<1, V, kT>(K, A, m0, B, ldb, n0, C, ldc, m, alpha, add);
    default: return;
  }
}

__mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

}  // namespace

void attn_gemm(int64_t M, int64_t N, int64_t K, AttnOperand A, const float* B, int64_t ldb, float* C, int64_t ldc,
               float alpha, bool add) {
  for (int64_t n0 = 0; n0 < N; n0 += 32) {
    const int64_t left = N - n0;
    const __mmask16 m[2] = {lanes(left), lanes(left - 16 > 0 ? left - 16 : 0)};
    const bool t = A.col != 1;  // transposed (A.row == 1; a 1 x 1 A is either)
    if (left > 16) {
      if (t) columns<2, true>(M, K, A, B, ldb, n0, C, ldc, m, alpha, add);
      else columns<2, false>(M, K, A, B, ldb, n0, C, ldc, m, alpha, add);
    } else {
      if (t) columns<1, true>(M, K, A, B, ldb, n0, C, ldc, m, alpha, add);
      else columns<1, false>(M, K, A, B, ldb, n0, C, ldc, m, alpha, add);
    }
  }
}

}  // namespace trainer::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace trainer::cpu {

bool attn_kernel_available() { return cpu_has(dnnl::cpu_isa::avx512_core); }

}  // namespace trainer::cpu
