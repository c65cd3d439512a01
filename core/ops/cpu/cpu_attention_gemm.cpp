// The AVX-512 micro-kernels of CPU attention's products (f32 FMAs, and AVX512_BF16 dot products of bf16 pairs): tiles of up to 8 rows by 32 columns of C, each accumulated over K in 16 registers from broadcast A elements and vector rows of B.
#include "core/ops/cpu/cpu_attention_gemm.h"

#include <immintrin.h>

#include "core/ops/cpu/cpu_isa_region.h"
#include "core/ops/cpu/cpu_util.h"

// Compiled for AVX-512 F and AVX512_BF16 whatever the build's -march; run only where
// attn_kernel_available() / attn_bf16_available() (below the region's end) say the CPU has what each
// uses: the f32 kernel AVX-512 F only (its intrinsics are those), the bf16 one AVX512_BF16 too.
TRAINER_ISA_BEGIN("avx512f,avx512bf16")

namespace trainer::cpu {
namespace {

// What differs between the two kernels: an element of A and B (a float, or a 32-bit word of two
// bf16 values adjacent along k), a vector of B's row, a broadcast of A's element, the multiply-add.
struct F32Lanes {
  using E = float;
  using V = __m512;
  static V load(__mmask16 m, const E* p) { return _mm512_maskz_loadu_ps(m, p); }
  static V broadcast(const E* p) { return _mm512_set1_ps(*p); }
  static __m512 madd(__m512 acc, V a, V b) { return _mm512_fmadd_ps(a, b, acc); }
};
struct Bf16Lanes {
  using E = uint32_t;
  using V = __m512bh;
  static V load(__mmask16 m, const E* p) { return (V)_mm512_maskz_loadu_epi32(m, p); }
  static V broadcast(const E* p) { return (V)_mm512_set1_epi32(int32_t(*p)); }
  static __m512 madd(__m512 acc, V a, V b) { return _mm512_dpbf16_ps(acc, a, b); }
};

// Columns [n0, n0 + 16·V) of rows [m0, m0 + R) of C (lanes past N masked off by m[0], m[1]); A
// row-major (kTransposed false: A's k stride 1) or transposed (its row stride 1). The accumulators
// are named registers: an array of them made g++ store every one to the stack at each k.
template <class L, int R, int V, bool kTransposed>
void tile(int64_t K, const typename L::E* A, int64_t arow, int64_t acol, int64_t m0, const typename L::E* B,
          int64_t ldb, int64_t n0, float* C, int64_t ldc, const __mmask16 (&m)[2], float alpha, bool add) {
  static_assert(R >= 1 && R <= 8 && (V == 1 || V == 2));
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  const int64_t sr = kTransposed ? 1 : arow, sk = kTransposed ? acol : 1;
  const typename L::E* a = A + m0 * sr;
  const typename L::E* b = B + n0;
  const __mmask16 m0k = m[0], m1k = m[1];
  for (int64_t k = 0; k < K; ++k, a += sk, b += ldb) {
    const typename L::V b0 = L::load(m0k, b);
    const typename L::V b1 = V == 2 ? L::load(m1k, b + 16) : b0;
#define TRAINER_ROW(r, x0, x1)                           \
  if constexpr (R > r) {                                  \
    const typename L::V ar = L::broadcast(a + r * sr);    \
    x0 = L::madd(x0, ar, b0);                             \
    if constexpr (V == 2) x1 = L::madd(x1, ar, b1);       \
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
template <class L, int V, bool kT>
void columns(int64_t M, int64_t K, const typename L::E* A, int64_t arow, int64_t acol, const typename L::E* B,
             int64_t ldb, int64_t n0, float* C, int64_t ldc, const __mmask16 (&m)[2], float alpha, bool add) {
  int64_t m0 = 0;
  for (; m0 + 8 <= M; m0 += 8) tile<L, 8, V, kT>(K, A, arow, acol, m0, B, ldb, n0, C, ldc, m, alpha, add);
  switch (M - m0) {
    case 7: return tile<L, 7, V, kT>(K, A, arow, acol, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 6: return tile<L, 6, V, kT>(K, A, arow, acol, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 5: return tile<L, 5, V, kT>(K, A, arow, acol, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 4: return tile<L, 4, V, kT>(K, A, arow, acol, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 3: return tile<L, 3, V, kT>(K, A, arow, acol, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 2: return tile<L, 2, V, kT>(K, A, arow, acol, m0, B, ldb, n0, C, ldc, m, alpha, add);
    case 1: return tile<L, 1, V, kT>(K, A, arow, acol, m0, B, ldb, n0, C, ldc, m, alpha, add);
    default: return;
  }
}

__mmask16 lanes(int64_t n) { return first_lanes(n); }

// C's columns 32 at a time (the last 16 or fewer alone).
template <class L, bool kT>
void product(int64_t M, int64_t N, int64_t K, const typename L::E* A, int64_t arow, int64_t acol,
             const typename L::E* B, int64_t ldb, float* C, int64_t ldc, float alpha, bool add) {
  for (int64_t n0 = 0; n0 < N; n0 += 32) {
    const int64_t left = N - n0;
    const __mmask16 m[2] = {lanes(left), lanes(left - 16 > 0 ? left - 16 : 0)};
    if (left > 16) columns<L, 2, kT>(M, K, A, arow, acol, B, ldb, n0, C, ldc, m, alpha, add);
    else columns<L, 1, kT>(M, K, A, arow, acol, B, ldb, n0, C, ldc, m, alpha, add);
  }
}

}  // namespace

void attn_gemm(int64_t M, int64_t N, int64_t K, AttnOperand A, const float* B, int64_t ldb, float* C, int64_t ldc,
               float alpha, bool add) {
  if (A.col != 1)  // transposed (A.row == 1; a 1 x 1 A is either)
    return product<F32Lanes, true>(M, N, K, A.p, A.row, A.col, B, ldb, C, ldc, alpha, add);
  product<F32Lanes, false>(M, N, K, A.p, A.row, A.col, B, ldb, C, ldc, alpha, add);
}

void attn_gemm_bf16(int64_t M, int64_t N, int64_t K2, AttnWords A, const uint32_t* B, int64_t ldb, float* C,
                    int64_t ldc, float alpha, bool add) {
  if (A.col != 1)  // transposed (A.row == 1)
    return product<Bf16Lanes, true>(M, N, K2, A.p, A.row, A.col, B, ldb, C, ldc, alpha, add);
  product<Bf16Lanes, false>(M, N, K2, A.p, A.row, A.col, B, ldb, C, ldc, alpha, add);
}

}  // namespace trainer::cpu

TRAINER_ISA_END

namespace trainer::cpu {

bool attn_kernel_available() { return cpu_has(dnnl::cpu_isa::avx512_core); }
bool attn_bf16_available() { return cpu_has(dnnl::cpu_isa::avx512_core_bf16); }

}  // namespace trainer::cpu
