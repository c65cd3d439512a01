// Dense on bf16 activations (the layer computing in bf16) against dense on f32 activations in a bf16 context (the logits' path, operands rounded inside) on random cases, 1-4 threads.
//
// Both paths multiply the same bf16 operands with f32 accumulation; the bf16 one reads x and dy
// where they are and stores y and dx rounded once. So:
// - on exact values (fastpath_fuzz.h: every product and partial sum is a float) y and dx of the
//   bf16 path are the f32 path's rounded to bf16, bit for bit, and dw and db are the same bits;
// - on wide values (bf16 values over many binades, runs of zeros) each path is within its bound of
//   float64: γ(K + 8)·Σ|terms| for a sum of K exact products, plus one bf16 rounding (u = 2^-8 of
//   the result) where the bf16 path stores.
#include <cmath>
#include <sstream>

#include "../cpu_bf16.h"
#include "core/ops/dense.h"
#include "fastpath_fuzz.h"
#include "reference.h"
#include "skip.h"

using namespace trainer;
using namespace trainer::test;
namespace fz = trainer::test::fuzz;
namespace b16 = trainer::test::bf16_check;

namespace {

struct Outputs {
  Tensor y, dx, dw, db;
};

// One forward and backward of `k` on x, w, b, dy (dx when `want_dx`); outputs start as NaN.
Outputs run(DenseKernel& k, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy, bool want_dx) {
  Outputs o{b16::nan_of(dy.shape(), dy.dtype()), want_dx ? b16::nan_of(x.shape(), x.dtype()) : Tensor(),
            b16::nan_of(w.shape(), DType::F32), b.defined() ? b16::nan_of(b.shape(), DType::F32) : Tensor()};
  k.forward(x, w, b, o.y);
  k.backward(x, w, dy, o.dx, o.dw, o.db);
  return o;
}

ref::Vec rounded(const ref::Vec& v) {
  ref::Vec r(v);
  for (double& e : r) e = b16::round_bf16(e);
  return r;
}

}  // namespace

TEST_CASE("fast path dense_bf16: dense on bf16 activations equals dense on f32 ones in a bf16 context, rounded once, on exact values, both within their bound of float64 on wide ones, over random shapes and 1-4 threads", "[fuzz]") {
  if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_refusal());
  fz::Budget budget(200);
  fz::Tally tally{"dense_bf16 (bf16 activations read and written in place vs f32 ones rounded inside)"};
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 7);
    const bool exact = std::bernoulli_distribution(0.5)(rng);
    const int64_t n = uniform_int(rng, 1, 3) == 1 ? uniform_int(rng, 1, 4) : uniform_int(rng, 1, 300);
    const int64_t kk = uniform_int(rng, 1, 300), u = uniform_int(rng, 1, 200);
    const bool bias = std::bernoulli_distribution(0.7)(rng), want_dx = std::bernoulli_distribution(0.8)(rng);
    const int threads = fz::threads(rng);
    INFO("case " << i << ": x [" << n << "x" << kk << "], " << u << " units" << (bias ? "" : ", no bias")
                 << (want_dx ? "" : ", no dx") << ", " << threads << " thread(s), " << (exact ? "exact" : "wide")
                 << " values; " << budget.repro(i));
    auto values = [&](int64_t count, int lo, int hi, bool gated) {
      return exact ? fz::exact_values(size_t(count), rng) : fz::wide_values(size_t(count), rng, DType::BF16, lo, hi, gated);
    };
    const ref::Vec xv = values(n * kk, -20, 6, true), wv = values(kk * u, -10, 2, false), bv = values(u, -10, 2, false);
    const ref::Vec dyv = values(n * u, -30, 0, true);

    OpContext& ctx = fz::cpu_context_for(threads, Precision::BF16, FastPaths::all());
    auto k = make_kernel<DenseKernel>(ctx, DenseParams{u, bias});
    const Tensor w = b16::make({kk, u}, DType::F32, wv), b = bias ? b16::make({u}, DType::F32, bv) : Tensor();
    const Outputs low = run(*k, b16::make({n, kk}, DType::BF16, xv), w, b, b16::make({n, u}, DType::BF16, dyv), want_dx);
    const Outputs f32 = run(*k, b16::make({n, kk}, DType::F32, xv), w, b, b16::make({n, u}, DType::F32, dyv), want_dx);
    const ref::Vec ly = b16::values(low.y), fy = b16::values(f32.y);
    const ref::Vec ldx = want_dx ? b16::values(low.dx) : ref::Vec(), fdx = want_dx ? b16::values(f32.dx) : ref::Vec();

    if (exact) {
      double d = std::max(fz::max_diff(ly, rounded(fy)), fz::max_diff(b16::values(low.dw), b16::values(f32.dw)));
      if (want_dx) d = std::max(d, fz::max_diff(ldx, rounded(fdx)));
      if (bias) d = std::max(d, fz::max_diff(b16::values(low.db), b16::values(f32.db)));
      tally.exact(threads, d);
      CHECK(d == 0);
      continue;
    }
    // Wide values: each output against float64 within γ(terms + 8)·(the sum of |terms|), and the bf16
    // path's stored y and dx within one more rounding of the result.
    ref::Vec ry, rdx, rdw, rdb, my, mdx, mdw, mdb;
    const ref::Vec* bp = bias ? &bv : nullptr;
    ry = ref::dense_forward(xv, wv, bp, n, kk, u);
    ref::dense_backward(xv, wv, dyv, n, kk, u, rdx, rdw, rdb);
    auto absolute = [](ref::Vec v) {
      for (double& e : v) e = std::fabs(e);
      return v;
    };
    const ref::Vec ax = absolute(xv), aw = absolute(wv), ab = absolute(bv), ady = absolute(dyv);
    my = ref::dense_forward(ax, aw, bias ? &ab : nullptr, n, kk, u);
    ref::dense_backward(ax, aw, ady, n, kk, u, mdx, mdw, mdb);
    auto bound = [](const ref::Vec& mag, const ref::Vec& want, int64_t terms, bool stored) {
      ref::Vec b(mag.size());
      for (size_t j = 0; j < mag.size(); ++j) {
        const double acc = fz::gamma(terms + 8) * mag[j];
        b[j] = acc + (stored ? 0x1p-8 * (std::fabs(want[j]) + acc) : 0.0);
      }
      return b;
    };
    double worst = 0;
    auto check = [&](const char* what, const ref::Vec& got, const ref::Vec& want, const ref::Vec& b) {
      const fz::Fit f = fz::fit(got, want, b);
      INFO(what << ": " << f.outside << " elements outside the bound (worst " << f.worst << " of it)");
      CHECK(f.outside == 0);
      worst = std::max(worst, f.worst);
    };
    check("y, bf16 path", ly, ry, bound(my, ry, kk + 1, true));
    check("y, f32 path", fy, ry, bound(my, ry, kk + 1, false));
    if (want_dx) {
      check("dx, bf16 path", ldx, rdx, bound(mdx, rdx, u, true));
      check("dx, f32 path", fdx, rdx, bound(mdx, rdx, u, false));
    }
    check("dw, bf16 path", b16::values(low.dw), rdw, bound(mdw, rdw, n, false));
    check("dw, f32 path", b16::values(f32.dw), rdw, bound(mdw, rdw, n, false));
    if (bias) check("db, bf16 path", b16::values(low.db), rdb, bound(mdb, rdb, n, false));
    tally.wide(threads, worst, "case " + std::to_string(i));
  }
  tally.report(budget);
}
