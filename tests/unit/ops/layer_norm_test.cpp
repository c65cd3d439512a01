// layer_norm tests: forward and every gradient against float64 on every backend (shapes, offsets, with and without gamma/beta), the same bits at 1-4 threads, bad shapes named.
#include <cmath>
#include <cstring>

#include "backends.h"
#include "core/ops/layer_norm.h"
#include "fastpath_fuzz.h"
#include "reference_transformer.h"

using namespace trainer;
using namespace trainer::test;

namespace {

struct Case {
  Shape x;
  bool scale = true, center = true;
  double offset = 0, spread = 1;  // x = offset + spread·U(-1, 1)
  float eps = 1e-3f;
};

ref::Vec vec_or_empty(const Tensor& t) { return t.defined() ? to_vec(t) : ref::Vec(); }

}  // namespace

TEST_CASE("layer_norm forward and backward match float64 reference", "[backends]") {
  const std::vector<Case> cases = {
      {{1, 1}},                            // one feature: x̂ = 0, dx = 0
      {{3, 1}, true, true, 0, 1, 1e-5f},   // PyTorch's epsilon
      {{1, 7}},
      {{5, 33}, true, false},              // scale only
      {{4, 9}, false, true},               // center only
      {{6, 16}, false, false},             // neither: no parameters
      {{2, 3, 64}},                        // [batch, time, features]
      {{17, 257}},                         // odd sizes
      {{3, 130, 96}},                      // 390 rows: several blocks of the CPU's parameter sums
      {{8, 40}, true, true, 1000, 0.01},   // |mean| >> spread: the row's shift keeps x̂
      {{8, 40}, true, true, 0, 1e-3},      // tiny spread (var ~ eps)
      {{8, 40}, true, true, 0, 300},       // large values
      {{0, 12}},                           // an empty batch: y nothing, dgamma/dbeta zero
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(471);
    for (const Case& c : cases) {
      const int64_t C = c.x.back(), rows = C ? c.x.numel() / C : 0;
      INFO("x [" << c.x.str() << "], scale " << c.scale << ", center " << c.center << ", offset " << c.offset
                 << ", spread " << c.spread << ", eps " << c.eps);
      auto k = make_kernel<LayerNormKernel>(be.ctx(), LayerNormParams{C, c.eps, c.center, c.scale});
      Tensor hx = random_tensor(c.x, rng, c.offset - c.spread, c.offset + c.spread);
      Tensor hg = c.scale ? random_tensor({C}, rng, 0.5, 1.5) : Tensor();
      Tensor hb = c.center ? random_tensor({C}, rng) : Tensor();
      const ref::Vec vx = to_vec(hx), vg = vec_or_empty(hg), vb = vec_or_empty(hb);
      Tensor x = be.upload(hx), g = be.upload(hg), b = be.upload(hb), y = be.nan(c.x);
      k->forward(x, g, b, y);
      be.check("y", y, ref::layer_norm_forward(vx, rows, C, c.scale ? &vg : nullptr, c.center ? &vb : nullptr, c.eps));

      Tensor hdy = random_tensor(c.x, rng);
      ref::Vec dx_want, dg_want, db_want;
      ref::layer_norm_backward(vx, rows, C, c.scale ? &vg : nullptr, to_vec(hdy), c.eps, dx_want, dg_want, db_want);
      Tensor dy = be.upload(hdy), dx = be.nan(c.x);
      Tensor dg = c.scale ? be.nan({C}) : Tensor(), db = c.center ? be.nan({C}) : Tensor();
      k->backward(x, g, dy, dx, dg, db);
      // dx is rstd times an O(1) sum: bounded relative to its own largest value (rstd ~ 30 for a
      // tiny spread, 1/300 for large values).
      be.check("dx", dx, dx_want);
      if (c.scale) be.check("dgamma", dg, dg_want);
      if (c.center) be.check("dbeta", db, db_want);
      // The parameter gradients alone (dx not needed) are the same values.
      if (c.scale || c.center) {
        Tensor dg2 = c.scale ? be.nan({C}) : Tensor(), db2 = c.center ? be.nan({C}) : Tensor();
        Tensor none = be.undefined(c.x);
        k->backward(x, g, dy, none, dg2, db2);
        if (c.scale) be.check("dgamma without dx", dg2, be.vec(dg), 0.0);
        if (c.center) be.check("dbeta without dx", db2, be.vec(db), 0.0);
      }
    }
  }
}

// The CPU's parameter sums add fixed blocks of rows in block order, and each row is one thread's:
// every output is the same bits at 1, 2, 3 and 4 threads.
TEST_CASE("layer_norm: the same bits at 1 to 4 CPU threads") {
  std::mt19937_64 rng(472);
  for (const Shape& s : {Shape{1000, 48}, Shape{7, 65, 33}, Shape{64 * 5 + 3, 8}}) {
    INFO("x [" << s.str() << "]");
    const int64_t C = s.back();
    Tensor x = random_tensor(s, rng), g = random_tensor({C}, rng), b = random_tensor({C}, rng);
    Tensor dy = random_tensor(s, rng);
    std::vector<ref::Vec> first;
    for (int threads = 1; threads <= 4; ++threads) {
      OpContext& ctx = fuzz::cpu_context_for(threads, Precision::FP32, FastPaths::all());
      auto k = make_kernel<LayerNormKernel>(ctx, LayerNormParams{C});
      Tensor y = Tensor::empty(s), dx = Tensor::empty(s), dg = Tensor::empty({C}), db = Tensor::empty({C});
      k->forward(x, g, b, y);
      k->backward(x, g, dy, dx, dg, db);
      const std::vector<ref::Vec> got = {to_vec(y), to_vec(dx), to_vec(dg), to_vec(db)};
      if (first.empty()) first = got;
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("threads " << threads << ", output " << i << " (y, dx, dgamma, dbeta)");
        CHECK(got[i] == first[i]);
      }
    }
  }
}

TEST_CASE("layer_norm rejects shapes and parameters that do not fit, naming them", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<LayerNormKernel>(be.ctx(), LayerNormParams{4});
    Tensor x = be.zeros({2, 4}), y = be.empty({2, 4}), g = be.zeros({4}), b = be.zeros({4});
    Tensor wrong = be.zeros({2, 5}), short_g = be.zeros({3});
    CHECK_THROWS_WITH(k->forward(wrong, g, b, y), "layer_norm: x has shape [2x5], expected a last axis of 4");
    CHECK_THROWS_WITH(k->forward(x, short_g, b, y), "layer_norm: gamma has shape [3], expected [4]");
    CHECK_THROWS_WITH(k->forward(x, g, Tensor(), y), "layer_norm: beta is undefined");
    auto plain = make_kernel<LayerNormKernel>(be.ctx(), LayerNormParams{4, 1e-3f, false, false});
    CHECK_THROWS_WITH(plain->forward(x, g, Tensor(), y), "layer_norm: gamma given to a layer norm without scale");
    CHECK_THROWS_AS(make_kernel<LayerNormKernel>(be.ctx(), LayerNormParams{0}), std::invalid_argument);
    CHECK_THROWS_AS(make_kernel<LayerNormKernel>(be.ctx(), LayerNormParams{4, 0.0f}), std::invalid_argument);
  }
}

// add_dx (the CPU's): backward adding its input gradient into dx (a pre-norm block's residual
// stream, whose other consumer wrote it first) against the same backward overwriting a dx apart,
// then summed as the executor sums (old + new, rounded): dgamma and dbeta the same bits; dx within
// u·(2|old + new| + |new|) of it — the kernel may fuse new's last product into the add (g++
// contracts it into an FMA), so each side's rounding of the sum and the product's rounding
// differ — random shapes, 1-4 threads, and the kernel without the path refusing.
TEST_CASE("fast path add_dx: layer_norm adding its input gradient into dx equals the gradient apart plus the old dx, random shapes, 1-4 threads", "[fuzz]") {
  fuzz::Budget budget(60);
  fuzz::Tally tally{"add_dx (layer_norm's dx added in place vs apart then summed)"};
  const double u = std::ldexp(1.0, -24);
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 23);
    const int64_t rows = uniform_int(rng, 1, 300), C = uniform_int(rng, 1, 300);
    const bool scale = uniform_int(rng, 0, 3) > 0, center = uniform_int(rng, 0, 3) > 0;
    const int threads = fuzz::threads(rng);
    INFO("case " << i << ": " << rows << " x " << C << (scale ? ", scale" : "") << (center ? ", center" : "") << ", "
                 << threads << " threads; " << budget.repro(i));
    const Shape s{rows, C};
    Tensor x = random_tensor(s, rng), dy = random_tensor(s, rng), old = random_tensor(s, rng);
    Tensor g = scale ? random_tensor({C}, rng) : Tensor();
    OpContext& ctx = fuzz::cpu_context_for(threads, Precision::FP32, FastPaths::all());
    auto k = make_kernel<LayerNormKernel>(ctx, LayerNormParams{C, 1e-3f, center, scale});
    REQUIRE(k->adds_dx());
    auto grads = [&] { return std::pair{scale ? Tensor::empty({C}) : Tensor(), center ? Tensor::empty({C}) : Tensor()}; };
    auto [dg_a, db_a] = grads();
    auto [dg_b, db_b] = grads();
    Tensor apart = Tensor::empty(s), added = Tensor::empty(s);
    k->backward(x, g, dy, apart, dg_a, db_a);
    std::memcpy(added.data(), old.data(), old.bytes());
    k->backward(x, g, dy, added, dg_b, db_b, true);
    if (scale) CHECK(to_vec(dg_a) == to_vec(dg_b));
    if (center) CHECK(to_vec(db_a) == to_vec(db_b));
    const ref::Vec va = to_vec(apart), vo = to_vec(old), vd = to_vec(added);
    double worst = 0;
    int64_t over = 0;
    for (size_t e = 0; e < va.size(); ++e) {
      const double want = double(float(vo[e] + va[e]));  // the executor's sum, one rounding
      const double bound = u * (2 * std::abs(vo[e] + va[e]) + std::abs(va[e])) + 1e-45;
      worst = std::max(worst, std::abs(vd[e] - want) / bound);
      over += std::abs(vd[e] - want) > bound;
    }
    CHECK(over == 0);
    tally.wide(threads, worst, "case " + std::to_string(i));
  }
  tally.report(budget);
  OpContext& off = fuzz::cpu_context_for(1, Precision::FP32, FastPaths::all().with(FastPath::AddDx, false));
  auto plain = make_kernel<LayerNormKernel>(off, LayerNormParams{4});
  CHECK_FALSE(plain->adds_dx());
  Tensor x = Tensor::empty({2, 4}), dx = Tensor::empty({2, 4}), dg = Tensor::empty({4}), db = Tensor::empty({4});
  CHECK_THROWS_WITH(plain->backward(x, Tensor::empty({4}), x, dx, dg, db, true),
                    "layer_norm: this backend cannot add the input gradient into dx");
}

// The CPU keeps the rows' statistics from forward for backward (keeps_stats): the same floats the
// backward computes from x, so y, dx (written or added), dgamma and dbeta are the same bits with and
// without them, on random shapes (one row, one feature, odd sizes; rows far from 0 whose mean the
// shift keeps) at 1-4 threads. Statistics of another shape are refused, naming it.
TEST_CASE("layer_norm: backward from the statistics forward kept equals backward computing them, bit for bit, random shapes, 1-4 threads", "[fuzz]") {
  fuzz::Budget budget(60);
  for (int64_t i = 0; budget.more(i); ++i) {
    if (budget.skip(i)) continue;
    std::mt19937_64 rng = budget.rng(i, 29);
    const int64_t rows = uniform_int(rng, 1, 4) == 1 ? 1 : uniform_int(rng, 1, 300);
    const int64_t C = uniform_int(rng, 1, 4) == 1 ? 1 : uniform_int(rng, 1, 300);
    const bool scale = uniform_int(rng, 0, 3) > 0, center = uniform_int(rng, 0, 3) > 0, add = uniform_int(rng, 0, 1) == 1;
    const int threads = fuzz::threads(rng);
    INFO("case " << i << ": " << rows << " x " << C << (scale ? ", scale" : "") << (center ? ", center" : "")
                 << (add ? ", dx added" : "") << ", " << threads << " threads; " << budget.repro(i));
    const Shape s{rows, C};
    Tensor x = random_tensor(s, rng), dy = random_tensor(s, rng), old = random_tensor(s, rng);
    if (uniform_int(rng, 0, 3) == 0)
      for (int64_t e = 0; e < x.numel(); ++e) x.f32()[e] += 1000.0f;  // far from 0: the shift's case
    Tensor g = scale ? random_tensor({C}, rng) : Tensor(), b = center ? random_tensor({C}, rng) : Tensor();
    OpContext& ctx = fuzz::cpu_context_for(threads, Precision::FP32, FastPaths::all());
    auto k = make_kernel<LayerNormKernel>(ctx, LayerNormParams{C, 1e-3f, center, scale});
    REQUIRE(k->keeps_stats());
    struct Out {
      Tensor y, dx, dg, db;
    };
    auto pass = [&](bool keep) {
      Out o{Tensor::empty(s), Tensor::empty(s), scale ? Tensor::empty({C}) : Tensor(), center ? Tensor::empty({C}) : Tensor()};
      Tensor stats = Tensor::empty({rows, 3});
      std::memcpy(o.dx.data(), old.data(), old.bytes());
      k->forward(x, g, b, o.y, keep ? &stats : nullptr);
      k->backward(x, g, dy, o.dx, o.dg, o.db, add && k->adds_dx(), keep ? &stats : nullptr);
      return o;
    };
    const Out kept = pass(true), again = pass(false);
    auto same = [](const Tensor& a, const Tensor& c) { return !a.defined() || std::memcmp(a.data(), c.data(), a.bytes()) == 0; };
    CHECK(same(kept.y, again.y));
    CHECK(same(kept.dx, again.dx));
    CHECK(same(kept.dg, again.dg));
    CHECK(same(kept.db, again.db));
  }
  OpContext& ctx = fuzz::cpu_context_for(1, Precision::FP32, FastPaths::all());
  auto k = make_kernel<LayerNormKernel>(ctx, LayerNormParams{4});
  Tensor x = Tensor::empty({2, 4}), y = Tensor::empty({2, 4}), p = Tensor::empty({4}), wrong = Tensor::empty({3, 3});
  CHECK_THROWS_WITH(k->forward(x, p, p, y, &wrong), "layer_norm: stats has shape [3x3], expected [2x3]");
}
