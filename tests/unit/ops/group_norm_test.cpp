// group_norm tests: forward and every gradient against float64 on every backend (images, sequences, vectors; one group, a group per channel; with and without gamma/beta; offsets, tiny and large spreads; empty), the same bits at 1-4 threads, bad shapes named.
#include <cmath>

#include "backends.h"
#include "core/ops/group_norm.h"

using namespace trainer;
using namespace trainer::test;

namespace {

struct Case {
  Shape x;
  int64_t groups;
  bool scale = true, center = true;
  double offset = 0, spread = 1;  // x = offset + spread·U(-1, 1)
  float eps = 1e-3f;
};

// Keras's GroupNormalization in float64: each (n, g) normalised over its positions and channels
// (biased variance), then gamma and beta per channel; the backward of that formula.
struct Ref {
  ref::Vec y, dx, dgamma, dbeta;
};
Ref reference(const Case& c, const ref::Vec& x, const ref::Vec* gamma, const ref::Vec* beta, const ref::Vec& dy) {
  const int64_t N = c.x[0], C = c.x.back(), P = N && C ? c.x.numel() / (N * C) : 0, G = c.groups, cg = C / G;
  const double M = double(P * cg);
  Ref r{ref::Vec(x.size()), ref::Vec(x.size()), ref::Vec(size_t(C), 0.0), ref::Vec(size_t(C), 0.0)};
  auto at = [&](int64_t n, int64_t p, int64_t c2) { return size_t((n * P + p) * C + c2); };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double mean = 0, var = 0;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t j = 0; j < cg; ++j) mean += x[at(n, p, g * cg + j)];
      mean /= M;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t j = 0; j < cg; ++j) var += (x[at(n, p, g * cg + j)] - mean) * (x[at(n, p, g * cg + j)] - mean);
      const double rstd = 1.0 / std::sqrt(var / M + double(c.eps));
      double sg = 0, sgx = 0;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t j = 0; j < cg; ++j) {
          const int64_t ch = g * cg + j;
          const size_t i = at(n, p, ch);
          const double xh = (x[i] - mean) * rstd, gm = gamma ? (*gamma)[size_t(ch)] : 1.0;
          r.y[i] = xh * gm + (beta ? (*beta)[size_t(ch)] : 0.0);
          sg += dy[i] * gm;
          sgx += dy[i] * gm * xh;
          r.dgamma[size_t(ch)] += dy[i] * xh;
          r.dbeta[size_t(ch)] += dy[i];
        }
      for (int64_t p = 0; p < P; ++p)
        for (int64_t j = 0; j < cg; ++j) {
          const int64_t ch = g * cg + j;
          const size_t i = at(n, p, ch);
          const double xh = (x[i] - mean) * rstd, gm = gamma ? (*gamma)[size_t(ch)] : 1.0;
          r.dx[i] = rstd * (dy[i] * gm - sg / M - xh * sgx / M);
        }
    }
  return r;
}

ref::Vec vec_or_empty(const Tensor& t) { return t.defined() ? to_vec(t) : ref::Vec(); }

}  // namespace

TEST_CASE("group_norm forward and backward match float64 reference", "[backends]") {
  const std::vector<Case> cases = {
      {{2, 5, 7, 6}, 3},                          // an image, 2 channels a group
      {{3, 4, 4, 8}, 8},                          // a group per channel (instance norm)
      {{2, 3, 3, 6}, 1},                          // one group: the whole sample
      {{4, 9, 12}, 4, true, false},               // a sequence, scale only
      {{3, 10}, 5, false, true},                  // a vector, center only
      {{2, 6, 6}, 2, false, false},               // no parameters
      {{1, 1, 1, 1}, 1},                          // one value: x̂ = 0
      {{3, 17, 13, 9}, 3, true, true, 0, 1, 1e-5f},  // odd sizes, PyTorch's epsilon
      {{64, 8, 8, 4}, 2},                         // several blocks of the CPU's parameter sums
      {{2, 6, 5, 4}, 2, true, true, 1000, 0.01},  // |mean| >> spread: the shift keeps x̂
      {{2, 6, 5, 4}, 2, true, true, 0, 1e-3},     // tiny spread (var ~ eps)
      {{2, 6, 5, 4}, 2, true, true, 0, 300},      // large values
      {{0, 4, 4, 6}, 3},                          // an empty batch: dgamma/dbeta zero
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(481);
    for (const Case& c : cases) {
      const int64_t C = c.x.back();
      INFO("x [" << c.x.str() << "], " << c.groups << " groups, scale " << c.scale << ", center " << c.center
                 << ", offset " << c.offset << ", spread " << c.spread << ", eps " << c.eps);
      auto k = make_kernel<GroupNormKernel>(be.ctx(), GroupNormParams{c.groups, c.eps, c.center, c.scale});
      Tensor hx = random_tensor(c.x, rng, c.offset - c.spread, c.offset + c.spread);
      Tensor hg = c.scale ? random_tensor({C}, rng, 0.5, 1.5) : Tensor();
      Tensor hb = c.center ? random_tensor({C}, rng) : Tensor();
      Tensor hdy = random_tensor(c.x, rng);
      const ref::Vec vx = to_vec(hx), vg = vec_or_empty(hg), vb = vec_or_empty(hb);
      const Ref want = reference(c, vx, c.scale ? &vg : nullptr, c.center ? &vb : nullptr, to_vec(hdy));
      Tensor x = be.upload(hx), g = be.upload(hg), b = be.upload(hb), y = be.nan(c.x), stats = be.nan({c.x[0], c.groups, 3});
      k->forward(x, g, b, y, stats);
      be.check("y", y, want.y);
      Tensor dy = be.upload(hdy), dx = be.nan(c.x);
      Tensor dg = c.scale ? be.nan({C}) : Tensor(), db = c.center ? be.nan({C}) : Tensor();
      k->backward(x, g, dy, stats, dx, dg, db);
      be.check("dx", dx, want.dx);
      if (c.scale) be.check("dgamma", dg, want.dgamma);
      if (c.center) be.check("dbeta", db, want.dbeta);
      // The parameter gradients alone, and dx alone: the same values.
      Tensor none = be.undefined(c.x), nog, nob;
      if (c.scale || c.center) {
        Tensor dg2 = c.scale ? be.nan({C}) : Tensor(), db2 = c.center ? be.nan({C}) : Tensor();
        k->backward(x, g, dy, stats, none, dg2, db2);
        if (c.scale) be.check("dgamma without dx", dg2, be.vec(dg), 0.0);
        if (c.center) be.check("dbeta without dx", db2, be.vec(db), 0.0);
      }
      Tensor dx2 = be.nan(c.x);
      k->backward(x, g, dy, stats, dx2, nog, nob);
      be.check("dx without the parameters'", dx2, be.vec(dx), 0.0);
    }
  }
}

TEST_CASE("group_norm's parameter gradients are the same bits at 1, 2, 3 and 4 CPU threads") {
  std::mt19937_64 rng(482);
  const Shape s{300, 6, 6, 8};
  const Tensor x = random_tensor(s, rng), dy = random_tensor(s, rng), g = random_tensor({8}, rng, 0.5, 1.5),
               b = random_tensor({8}, rng);
  std::vector<float> first;
  for (int threads : {1, 2, 3, 4}) {
    auto ctx = make_context(Device::cpu(), ContextOptions{threads});
    auto k = make_kernel<GroupNormKernel>(*ctx, GroupNormParams{4, 1e-3f, true, true});
    Tensor y = Tensor::empty(s), stats = Tensor::empty({300, 4, 3}), dx = Tensor::empty(s), dg = Tensor::empty({8}),
           db = Tensor::empty({8});
    k->forward(x, g, b, y, stats);
    k->backward(x, g, dy, stats, dx, dg, db);
    std::vector<float> got(dg.f32(), dg.f32() + 8);
    got.insert(got.end(), db.f32(), db.f32() + 8);
    got.insert(got.end(), dx.f32(), dx.f32() + 64);
    if (first.empty()) first = got;
    INFO(threads << " threads");
    CHECK(got == first);
  }
}

TEST_CASE("group_norm refuses channels not a multiple of groups, wrong stats and aliasing, naming them", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<GroupNormKernel>(be.ctx(), GroupNormParams{4, 1e-3f, true, true});
    Tensor x = be.zeros({2, 3, 6}), g = be.zeros({6}), b = be.zeros({6}), y = be.zeros({2, 3, 6}), st = be.zeros({2, 4, 3});
    CHECK_THROWS_WITH(k->forward(x, g, b, y, st), Catch::Contains("group_norm: x's 6 channels are not a multiple of 4 groups"));
    Tensor x8 = be.zeros({2, 3, 8}), g8 = be.zeros({8}), b8 = be.zeros({8}), y8 = be.zeros({2, 3, 8});
    Tensor st3 = be.zeros({2, 3, 3});
    CHECK_THROWS_WITH(k->forward(x8, g8, b8, y8, st3), Catch::Contains("stats"));
    Tensor st4 = be.zeros({2, 4, 3});
    CHECK_THROWS_WITH(k->forward(x8, g8, b8, x8, st4), Catch::Contains("y aliases x"));
    Tensor none;
    CHECK_THROWS_WITH(k->forward(x8, none, b8, y8, st4), Catch::Contains("gamma"));
  }
}
