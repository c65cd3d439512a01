// prelu tests: Keras's PReLU forward and input gradient exactly the f32 arithmetic rounded once (f32, bf16, f16), alpha's gradient within one f32 rounding of the float64 sum, on every backend, for every pattern of shared axes; batch 1, one channel, empty; the same bits at 1-4 CPU threads; arguments refused.
#include "core/ops/prelu.h"

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

struct Case {
  Shape x;
  std::vector<bool> shared;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c{
      {{2, 5, 7, 3}, {true, true, false}},    // one slope per channel (shared_axes [1, 2])
      {{2, 5, 7, 3}, {false, false, false}},  // a slope per position
      {{2, 5, 7, 3}, {false, false, true}},   // [5, 7, 1]
      {{2, 5, 7, 3}, {false, true, false}},   // [5, 1, 3]: unshared, shared, unshared
      {{2, 5, 7, 3}, {true, false, true}},    // [1, 7, 1]
      {{2, 5, 7, 3}, {true, true, true}},     // one slope
      {{1, 1}, {false}},                      // batch 1, one channel
      {{3, 9}, {true}},
      {{4, 6, 5}, {true, false}},             // a sequence, per feature
      {{3, 17, 13}, {false, true}},
      {{0, 4}, {false}},                      // empty batch: dalpha is 0
      {{3, 0, 4}, {true, false}},             // no positions: dalpha is 0
  };
  return c;
}

// x with exact zeros (dx is 0 there) and both signs; alpha of both signs.
ref::Vec x_values(const Shape& s, std::mt19937_64& rng, DType t) {
  ref::Vec v = random_values(s, rng, t, -3.0, 3.0);
  std::uniform_int_distribution<int> coin(0, 9);
  for (double& e : v)
    if (coin(rng) == 0) e = 0.0;
  return v;
}

void check_prelu(OpContext& ctx, DType t, std::mt19937_64& rng) {
  for (const Case& c : cases()) {
    std::vector<int64_t> ad;
    for (size_t k = 0; k < c.shared.size(); ++k) ad.push_back(c.shared[k] ? 1 : c.x[k + 1]);
    const Shape as(ad);
    INFO(dtype_name(t) << " x [" << c.x.str() << "] alpha [" << as.str() << "]");
    auto k = make_kernel<PReluKernel>(ctx, PReluParams{c.shared});
    const ref::Vec x = x_values(c.x, rng, t), a = random_values(as, rng, DType::F32, -0.5, 1.5),
                   dy = random_values(c.x, rng, t);
    // The reference: alpha's index of each element from its coordinates.
    const int64_t A = as.numel(), S = c.x.numel() / std::max<int64_t>(c.x[0], 1);
    ref::Vec y(x.size()), dx(x.size()), da(size_t(A), 0.0), mag(size_t(A), 0.0);
    for (size_t e = 0; e < x.size(); ++e) {
      int64_t j = int64_t(e) % S, ai = 0, scale = 1;
      for (int k2 = int(c.shared.size()) - 1; k2 >= 0; --k2) {
        const int64_t d = c.x[size_t(k2) + 1], coord = j % d;
        j /= d;
        if (!c.shared[size_t(k2)]) ai += coord * scale, scale *= d;
      }
      const float xv = float(x[e]), av = float(a[size_t(ai)]), g = float(dy[e]);
      y[e] = round_to(t, double(xv > 0 ? xv : av * xv));
      dx[e] = round_to(t, double(xv > 0 ? g : xv < 0 ? av * g : 0.0f));
      if (xv < 0) da[size_t(ai)] += double(g) * double(xv), mag[size_t(ai)] += std::fabs(double(g) * double(xv));
    }
    const Tensor tx = to_device(ctx, make(c.x, t, x)), ta = to_device(ctx, make(as, DType::F32, a)),
                 tdy = to_device(ctx, make(c.x, t, dy));
    Tensor ty = to_device(ctx, nan_of(c.x, t)), tdx = to_device(ctx, nan_of(c.x, t)),
           tda = to_device(ctx, nan_of(as, DType::F32));
    k->forward(tx, ta, ty);
    CHECK(values(to_host(ctx, ty)) == y);
    k->backward(tx, ta, tdy, tdx, tda);
    CHECK(values(to_host(ctx, tdx)) == dx);
    const ref::Vec got = values(to_host(ctx, tda));
    for (int64_t i = 0; i < A; ++i) {
      INFO("dalpha[" << i << "] = " << got[size_t(i)] << ", float64 " << da[size_t(i)]);
      CHECK(std::fabs(got[size_t(i)] - da[size_t(i)]) <= 0x1p-24 * std::fabs(da[size_t(i)]) + 1e-12 * mag[size_t(i)]);
    }
    // In place (y over x, dx over dy), and each gradient alone.
    Tensor ix = to_device(ctx, make(c.x, t, x)), idy = to_device(ctx, make(c.x, t, dy)), none;
    k->forward(ix, ta, ix);
    CHECK(values(to_host(ctx, ix)) == y);
    Tensor da2 = to_device(ctx, nan_of(as, DType::F32));
    k->backward(tx, ta, idy, idy, da2);
    CHECK(values(to_host(ctx, idy)) == dx);
    CHECK(values(to_host(ctx, da2)) == got);
    Tensor dx3 = to_device(ctx, nan_of(c.x, t));
    k->backward(tx, ta, tdy, dx3, none);
    CHECK(values(to_host(ctx, dx3)) == dx);
  }
}

}  // namespace

TEST_CASE("prelu forward and dx are the f32 arithmetic rounded once, dalpha the float64 sum within one rounding, f32",
          "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(141);
    check_prelu(be.ctx(), DType::F32, rng);
  }
}

TEST_CASE("prelu forward and dx are the f32 arithmetic rounded once, dalpha the float64 sum within one rounding, low "
          "precision",
          "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(142);
    check_prelu(lo.ctx(), lo.type, rng);
  }
}

TEST_CASE("prelu's alpha gradient is the same bits at 1, 2, 3 and 4 CPU threads") {
  std::mt19937_64 rng(143);
  for (const Case& c : {Case{{600, 33, 17}, {true, false}}, Case{{300, 8, 8, 16}, {true, true, false}},
                        Case{{97, 40, 40}, {false, false}}}) {
    std::vector<int64_t> ad;
    for (size_t k = 0; k < c.shared.size(); ++k) ad.push_back(c.shared[k] ? 1 : c.x[k + 1]);
    const Shape as(ad);
    const Tensor x = make(c.x, DType::F32, x_values(c.x, rng, DType::F32)), dy = make(c.x, DType::F32, random_values(c.x, rng, DType::F32)),
                 a = make(as, DType::F32, random_values(as, rng, DType::F32));
    std::vector<float> first;
    for (int threads : {1, 2, 3, 4}) {
      auto ctx = make_context(Device::cpu(), ContextOptions{threads});
      auto k = make_kernel<PReluKernel>(*ctx, PReluParams{c.shared});
      Tensor da = Tensor::empty(as), none;
      k->backward(x, a, dy, none, da);
      std::vector<float> got(da.f32(), da.f32() + da.numel());
      if (first.empty()) first = got;
      INFO("x [" << c.x.str() << "], " << threads << " threads");
      CHECK(got == first);
    }
  }
}

TEST_CASE("prelu refuses alpha of the wrong shape, dx over x and non-float x, naming the argument", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    OpContext& ctx = be.ctx();
    auto k = make_kernel<PReluKernel>(ctx, PReluParams{{true, false}});
    const Tensor x = to_device(ctx, make({2, 3, 4}, DType::F32, ref::Vec(24, -1.0)));
    const Tensor a = to_device(ctx, make({1, 4}, DType::F32, ref::Vec(4, 0.5)));
    const Tensor wrong = to_device(ctx, make({3, 4}, DType::F32, ref::Vec(12, 0.5)));
    Tensor y = to_device(ctx, nan_of({2, 3, 4}, DType::F32)), none;
    CHECK_THROWS_WITH(k->forward(x, wrong, y), Catch::Contains("prelu") && Catch::Contains("alpha"));
    const Tensor flat = to_device(ctx, make({2, 12}, DType::F32, ref::Vec(24, 1.0)));
    CHECK_THROWS_WITH(k->forward(flat, a, y), Catch::Contains("x must have rank 3"));
    Tensor same = x;
    CHECK_THROWS_WITH(k->backward(x, a, y, same, none), Catch::Contains("dx aliases x"));
    const Tensor ints = to_device(ctx, Tensor::empty({2, 3, 4}, DType::I32));
    CHECK_THROWS_WITH(k->forward(ints, a, y), Catch::Contains("x must be f32, bf16 or f16"));
  }
}
