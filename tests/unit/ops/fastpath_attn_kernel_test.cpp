// The attention micro-kernel (cpu::attn_gemm, the attn_kernel path) against sgemm (the path beside it) and float64 on random shapes: row-major and transposed A, alpha, adding into C, ragged tiles, and nothing written outside C.
//
// On exact values (fastpath_fuzz.h: every product and partial sum is a float) the kernel, sgemm and
// float64 agree bit for bit, however either orders its sums; on wide values (many binades, runs of
// zeros) each is within γ(K + 2)·Σ|a·b| (plus |C| for the add) of float64. Each case's C sits in a
// larger buffer of NaN: an element written past a row's N columns or past M rows (a mask wrong in
// a ragged tile) shows as a changed NaN.
#include <cmath>

#include "core/ops/cpu/cpu_attention_gemm.h"
#include "core/ops/cpu/cpu_util.h"
#include "fastpath_fuzz.h"
#include "skip.h"

using namespace trainer;
using namespace trainer::test;
namespace fz = trainer::test::fuzz;

TEST_CASE("fast path attn_kernel: the attention micro-kernel equals sgemm and float64 on exact values and is within its bound on wide ones, random shapes, transposed A, alpha and add", "[fuzz]") {
  if (!cpu::attn_kernel_available()) TRAINER_SKIP(CpuFeature, "the attention micro-kernel needs AVX-512 F, which this CPU lacks");
  fz::Budget budget(600);
  fz::Tally tally{"attn_kernel (attention's products in registers vs sgemm)"};
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 13);
    const bool exact = std::bernoulli_distribution(0.5)(rng);
    const int64_t M = uniform_int(rng, 0, 40), N = uniform_int(rng, 1, 90), K = uniform_int(rng, 0, 140);
    const bool trans = std::bernoulli_distribution(0.4)(rng), add = std::bernoulli_distribution(0.4)(rng);
    const float alpha = std::bernoulli_distribution(0.5)(rng) ? 1.0f : 0.25f;
    // Strides with slack: A's leading dimension, B's and C's rows.
    const int64_t lda = (trans ? M : K) + uniform_int(rng, 0, 5), ldb = N + uniform_int(rng, 0, 20);
    const int64_t ldc = N + uniform_int(rng, 0, 20);
    INFO("case " << i << ": " << M << "x" << N << "x" << K << (trans ? ", A transposed" : "") << (add ? ", add" : "")
                 << ", alpha " << alpha << ", lda " << lda << ", ldb " << ldb << ", ldc " << ldc << ", "
                 << (exact ? "exact" : "wide") << " values; " << budget.repro(i));
    auto values = [&](int64_t n, int lo, int hi) {
      return exact ? fz::exact_values(size_t(n), rng) : fz::wide_values(size_t(n), rng, DType::F32, lo, hi, true);
    };
    const int64_t arows = trans ? K : M;  // A stored [arows, lda]
    const ref::Vec av = values(std::max<int64_t>(arows * lda, 1), -20, 4), bv = values(std::max<int64_t>(K * ldb, 1), -20, 4);
    const ref::Vec cv = values(std::max<int64_t>((M + 2) * ldc, 1), -20, 4);
    std::vector<float> a(av.begin(), av.end()), b(bv.begin(), bv.end());
    auto a_at = [&](int64_t m, int64_t k) { return double(a[size_t(trans ? k * lda + m : m * lda + k)]); };
    // C and two more rows, NaN outside [M, N): the kernel's and sgemm's.
    std::vector<float> c_kernel(cv.size(), NAN), c_sgemm(cv.size(), NAN);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) c_kernel[size_t(m * ldc + n)] = c_sgemm[size_t(m * ldc + n)] = float(cv[size_t(m * ldc + n)]);

    cpu::attn_gemm(M, N, K, trans ? cpu::AttnOperand{a.data(), 1, lda} : cpu::AttnOperand{a.data(), lda, 1}, b.data(),
                   ldb, c_kernel.data(), ldc, alpha, add);
    if (M > 0 && K > 0) {
      cpu::sgemm("test", trans ? 'T' : 'N', 'N', M, N, K, a.data(), lda, b.data(), ldb, add ? 1.0f : 0.0f, c_sgemm.data(), ldc);
    } else if (!add) {
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) c_sgemm[size_t(m * ldc + n)] = 0.0f;
    }
    int64_t outside = 0;
    double diff = 0, worst = 0;
    for (int64_t m = 0; m < M + 2; ++m)
      for (int64_t n = 0; n < ldc; ++n) {
        const size_t at = size_t(m * ldc + n);
        if (m >= M || n >= N) {
          outside += !std::isnan(c_kernel[at]);
          continue;
        }
        double want = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          want += a_at(m, k) * double(b[size_t(k * ldb + n)]);
          mag += std::fabs(a_at(m, k) * double(b[size_t(k * ldb + n)]));
        }
        want *= alpha, mag *= alpha;
        // sgemm has no alpha here: the kernel's alpha·Σ against alpha·(sgemm's Σ), both exact on exact values
        double sg = double(c_sgemm[at]);
        if (add) sg = (sg - cv[at]) * alpha + cv[at];
        else sg *= alpha;
        if (add) want += cv[at], mag += std::fabs(cv[at]);
        const double got = c_kernel[at];
        if (exact) {
          diff = std::max({diff, std::fabs(got - want), std::fabs(got - sg)});
        } else {
          const double bound = fz::gamma(K + 2) * mag;
          const double e = std::fabs(got - want);
          worst = std::max(worst, bound > 0 ? e / bound : (e == 0 ? 0.0 : INFINITY));
        }
      }
    INFO(outside << " elements written outside C's [M, N]");
    CHECK(outside == 0);
    if (exact) {
      INFO("largest difference from float64 and sgemm: " << diff);
      CHECK(diff == 0);
      tally.exact(1, diff);
    } else {
      INFO("worst error: " << worst << " of the bound");
      CHECK(worst <= 1);
      tally.wide(1, worst, "case " + std::to_string(i));
    }
  }
  tally.report(budget);
}
