// rescale tests: Keras's Rescaling, x·scale + offset (the product rounded, then the sum) and dy·scale, exactly the f32 arithmetic rounded once to the type (f32, bf16, f16) on every backend, one value or one per channel, in place, empty; arguments refused.
#include "core/ops/rescale.h"

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

void check_rescale(OpContext& ctx, DType t, std::mt19937_64& rng) {
  struct Case {
    Shape s;
    RescaleParams p;
  };
  const std::vector<Case> cases{
      {{2, 5, 7, 3}, {{1.0f / 255.0f}, {0.0f}}},                                   // Keras's 1/255
      {{2, 5, 7, 3}, {{0.0171f, -0.0175f, 0.0174f}, {-2.118f, -2.036f, -1.804f}}},  // per channel
      {{3, 9}, {{2.5f}, {-1.25f}}},
      {{1, 1}, {{-3.0f}, {0.5f}}},
      {{0, 4}, {{2.0f}, {1.0f}}},
      {{4, 6, 5}, {{1.5f, 0.5f, -1.0f, 3.0f, 0.25f}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f}}},
  };
  for (const Case& c : cases) {
    INFO(dtype_name(t) << " [" << c.s.str() << "], " << c.p.scale.size() << " values");
    auto k = make_kernel<RescaleKernel>(ctx, c.p);
    const ref::Vec x = random_values(c.s, rng, t, -300.0, 300.0), dy = random_values(c.s, rng, t);
    const int64_t C = int64_t(c.p.scale.size());
    ref::Vec y(x.size()), dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t ch = C == 1 ? 0 : i % size_t(C);
      const float prod = float(x[i]) * c.p.scale[ch];  // rounded, then the sum rounded
      y[i] = round_to(t, double(prod + c.p.offset[ch]));
      dx[i] = round_to(t, double(float(dy[i]) * c.p.scale[ch]));
    }
    const Tensor tx = to_device(ctx, make(c.s, t, x)), tdy = to_device(ctx, make(c.s, t, dy));
    Tensor ty = to_device(ctx, nan_of(c.s, t)), tdx = to_device(ctx, nan_of(c.s, t));
    k->forward(tx, ty);
    CHECK(values(to_host(ctx, ty)) == y);
    k->backward(tdy, tdx);
    CHECK(values(to_host(ctx, tdx)) == dx);
    Tensor ix = to_device(ctx, make(c.s, t, x)), idy = to_device(ctx, make(c.s, t, dy));  // in place
    k->forward(ix, ix);
    CHECK(values(to_host(ctx, ix)) == y);
    k->backward(idy, idy);
    CHECK(values(to_host(ctx, idy)) == dx);
  }
}

}  // namespace

TEST_CASE("rescale is Keras's x·scale + offset and dy·scale rounded once, f32", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(151);
    check_rescale(be.ctx(), DType::F32, rng);
  }
}

TEST_CASE("rescale is Keras's x·scale + offset and dy·scale rounded once, low precision", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(152);
    check_rescale(lo.ctx(), lo.type, rng);
  }
}

TEST_CASE("rescale refuses mismatched channels and values, naming them", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<RescaleKernel>(be.ctx(), RescaleParams{{1.0f, 2.0f, 3.0f}, {0.0f, 0.0f, 0.0f}});
    Tensor x = to_device(be.ctx(), make({2, 4}, DType::F32, ref::Vec(8, 1.0))), y = to_device(be.ctx(), nan_of({2, 4}, DType::F32));
    CHECK_THROWS_WITH(k->forward(x, y), Catch::Contains("rescale: x [2x4] does not end in the 3 channels"));
    CHECK_THROWS_WITH(make_kernel<RescaleKernel>(be.ctx(), RescaleParams{{1.0f, 2.0f}, {0.0f}}),
                      Catch::Contains("one value each or one per channel"));
    CHECK_THROWS_WITH(make_kernel<RescaleKernel>(be.ctx(), RescaleParams{{INFINITY}, {0.0f}}), Catch::Contains("finite"));
  }
}
