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
#include "core/ops/cpu/cpu_transpose.h"
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

// dense_wgrad: dw from a transposed copy of the narrower of x and dy (u ≤ k: dy, then dwᵀ
// transposed; else x) against the matmul reading x through strides. Only dw's operands' layout
// differs: y, dx and db are the same bits; dw the same bits on exact values, within γ(n + 8)·Σ|x·dy|
// of float64 on wide ones (both paths: their sums of k run in another order where oneDNN blocks k
// differently, as at gpt_bytes' 4096 rows; the test counts the cases whose dw differ), and on each
// path the same bits at any thread count. The shapes cross u = k (both branches), n below and
// above a tile of 32 rows and in the thousands, batch 1, one unit. The
// fast pass must have transposed (cpu::transposes_done), the slow one not; one bit flipped in the
// copy fails 127 checks.
TEST_CASE("fast path dense_wgrad: bf16 dense's weight gradient from a transposed copy equals the strided matmul's on exact values, both within their bound of float64 on wide ones, same bits at 1-4 threads", "[fuzz]") {
  if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_refusal());
  fz::Budget budget(160);
  fz::Tally tally{"dense_wgrad (dw from a transposed copy vs the matmul reading x transposed)"};
  int64_t differed = 0, wide = 0, by_dy = 0;
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 11);
    const bool exact = std::bernoulli_distribution(0.4)(rng), low = std::bernoulli_distribution(0.75)(rng);
    // One case in eight with gpt_bytes' row count or so (where oneDNN blocks k otherwise), narrower.
    const int64_t kind = uniform_int(rng, 1, 8), most = kind == 8 ? 48 : 160;
    const int64_t n = kind == 1 ? uniform_int(rng, 1, 3) : kind == 8 ? uniform_int(rng, 2000, 4200) : uniform_int(rng, 1, 700);
    const int64_t kk = uniform_int(rng, 1, 5) == 1 ? 1 : uniform_int(rng, 1, most);
    const int64_t u = uniform_int(rng, 1, 5) == 1 ? kk : uniform_int(rng, 1, most);
    const bool bias = std::bernoulli_distribution(0.7)(rng);
    const int threads = fz::threads(rng), other = 1 + (threads % 4);
    by_dy += u <= kk;
    INFO("case " << i << ": x [" << n << "x" << kk << "], " << u << " units, " << (low ? "bf16" : "f32")
                 << " activations, " << threads << " thread(s) (and " << other << "), " << (exact ? "exact" : "wide")
                 << " values; " << budget.repro(i));
    auto values = [&](int64_t count, int lo, int hi, bool gated) {
      return exact ? fz::exact_values(size_t(count), rng) : fz::wide_values(size_t(count), rng, DType::BF16, lo, hi, gated);
    };
    const ref::Vec xv = values(n * kk, -20, 6, true), wv = values(kk * u, -10, 2, false), bv = values(u, -10, 2, false);
    const ref::Vec dyv = values(n * u, -30, 0, true);
    const DType t = low ? DType::BF16 : DType::F32;
    auto pass = [&](int th, bool fast) {
      OpContext& ctx = fz::cpu_context_for(th, Precision::BF16, FastPaths::all().with(FastPath::DenseWgrad, fast));
      auto k = make_kernel<DenseKernel>(ctx, DenseParams{u, bias});
      const Tensor w = b16::make({kk, u}, DType::F32, wv), b = bias ? b16::make({u}, DType::F32, bv) : Tensor();
      return run(*k, b16::make({n, kk}, t, xv), w, b, b16::make({n, u}, t, dyv), true);
    };
    const int64_t before = cpu::transposes_done();
    const Outputs fast = pass(threads, true);
    const int64_t between = cpu::transposes_done();
    const Outputs slow = pass(threads, false), again = pass(other, true);
    CHECK(between > before);                                  // the fast path ran
    CHECK(cpu::transposes_done() - between == between - before);  // the slow one did not transpose
    const ref::Vec fdw = b16::values(fast.dw), sdw = b16::values(slow.dw);
    CHECK(fz::max_diff(b16::values(fast.y), b16::values(slow.y)) == 0);
    CHECK(fz::max_diff(b16::values(fast.dx), b16::values(slow.dx)) == 0);
    if (bias) CHECK(fz::max_diff(b16::values(fast.db), b16::values(slow.db)) == 0);
    CHECK(std::memcmp(fast.dw.data(), again.dw.data(), fast.dw.bytes()) == 0);  // the thread count changes no bit
    if (exact) {
      const double d = fz::max_diff(fdw, sdw);
      tally.exact(threads, d);
      CHECK(d == 0);
      continue;
    }
    ref::Vec rdx, rdw, rdb, mdx, mdw, mdb;
    ref::dense_backward(xv, wv, dyv, n, kk, u, rdx, rdw, rdb);
    auto absolute = [](ref::Vec v) {
      for (double& e : v) e = std::fabs(e);
      return v;
    };
    ref::dense_backward(absolute(xv), absolute(wv), absolute(dyv), n, kk, u, mdx, mdw, mdb);
    ref::Vec bound(mdw.size());
    for (size_t j = 0; j < mdw.size(); ++j) bound[j] = fz::gamma(n + 8) * mdw[j];
    double worst = 0;
    for (const auto& [what, got] : {std::pair<const char*, const ref::Vec*>{"dw, transposed copy", &fdw}, {"dw, strided", &sdw}}) {
      const fz::Fit f = fz::fit(*got, rdw, bound);
      INFO(what << ": " << f.outside << " elements outside the bound (worst " << f.worst << " of it)");
      CHECK(f.outside == 0);
      worst = std::max(worst, f.worst);
    }
    ++wide;
    differed += std::memcmp(fast.dw.data(), slow.dw.data(), fast.dw.bytes()) != 0;
    tally.wide(threads, worst, "case " + std::to_string(i));
  }
  tally.report(budget);
  WARN("dense_wgrad: " << differed << " of " << wide << " wide cases gave another dw than the strided matmul; " << by_dy
                       << " cases with u <= k (dy transposed)");
}
