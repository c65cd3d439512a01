// pad2d tests: zero padding forward and cropping backward against the float64 reference, empty batch, errors.
#include "core/ops/pad2d.h"

#include <sstream>

#include "backends.h"

using namespace trainer;
using namespace trainer::test;

namespace {

void check_case(const Backend& be, const ref::PadDims& d, std::mt19937_64& rng) {
  std::ostringstream s;
  s << "x " << d.n << "x" << d.h << "x" << d.w << "x" << d.c << ", padding " << d.top << "/" << d.bottom << " x "
    << d.left << "/" << d.right;
  INFO(s.str());
  Pad2dParams p{d.top, d.bottom, d.left, d.right};
  auto k = make_kernel<Pad2dKernel>(be.ctx(), p);
  Shape xs{d.n, d.h, d.w, d.c};
  Shape ys = pad2d_output_shape(xs.without_batch(), p).with_batch(d.n);
  REQUIRE(ys == Shape{d.n, d.h + d.top + d.bottom, d.w + d.left + d.right, d.c});
  Tensor hx = random_tensor(xs, rng);
  Tensor y = be.nan(ys);
  k->forward(be.upload(hx), y);
  be.check("y", y, ref::pad2d_forward(d, to_vec(hx)), 0.0);  // copies: exact
  Tensor hdy = random_tensor(ys, rng);
  Tensor dx = be.nan(xs);
  k->backward(be.upload(hdy), dx);
  be.check("dx", dx, ref::pad2d_backward(d, to_vec(hdy)), 0.0);
}

}  // namespace

TEST_CASE("pad2d forward and backward match float64 reference on corner cases", "[backends]") {
  std::vector<ref::PadDims> cases = {
      {2, 5, 6, 3, 1, 1, 1, 1},     // symmetric 1 (Keras ZeroPadding2D default)
      {1, 7, 7, 4, 0, 1, 0, 1},     // MobileNetV2's correct_pad for even sizes: bottom/right only
      {2, 8, 9, 5, 1, 1, 0, 0},     // rows only
      {2, 4, 3, 2, 0, 0, 2, 3},     // columns only, asymmetric
      {3, 5, 4, 3, 2, 1, 3, 0},     // all different
      {2, 6, 5, 3, 0, 0, 0, 0},     // no padding: a copy
      {1, 1, 1, 1, 3, 3, 3, 3},     // 1x1x1 input
      {2, 3, 2, 7, 5, 0, 0, 4},     // more padding than input
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(121);
    for (const auto& c : cases) check_case(be, c, rng);
  }
}

TEST_CASE("pad2d forward and backward match float64 reference on random shapes", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(232);
    for (int i = 0; i < 30; ++i) {
      ref::PadDims d{uniform_int(rng, 1, 4),         uniform_int(rng, 1, 17),       uniform_int(rng, 1, 17),
                     uniform_int(rng, 1, 40),        int(uniform_int(rng, 0, 3)), int(uniform_int(rng, 0, 3)),
                     int(uniform_int(rng, 0, 3)), int(uniform_int(rng, 0, 3))};
      check_case(be, d, rng);
    }
    // Large enough for the CPU's OpenMP path.
    check_case(be, {4, 56, 56, 24, 0, 1, 0, 1}, rng);
  }
}

TEST_CASE("pad2d handles an empty batch and rejects mismatched shapes", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(343);
    auto k = make_kernel<Pad2dKernel>(be.ctx(), Pad2dParams{1, 0, 2, 1});
    Tensor x0 = be.empty({0, 4, 4, 3}), y0 = be.empty({0, 5, 7, 3});
    REQUIRE_NOTHROW(k->forward(x0, y0));
    REQUIRE_NOTHROW(k->backward(y0, x0));
    Tensor x = be.upload(random_tensor({2, 4, 4, 3}, rng));
    Tensor bad_y = be.empty({2, 6, 7, 3});
    CHECK_THROWS_AS(k->forward(x, bad_y), std::invalid_argument);
    Tensor bad_c = be.empty({2, 5, 7, 4});
    CHECK_THROWS_AS(k->forward(x, bad_c), std::invalid_argument);
    Tensor dy = be.upload(random_tensor({2, 5, 7, 3}, rng));
    Tensor bad_dx = be.empty({2, 4, 5, 3});
    CHECK_THROWS_AS(k->backward(dy, bad_dx), std::invalid_argument);
    Tensor x3 = be.upload(random_tensor({4, 4, 3}, rng));
    CHECK_THROWS_AS(k->forward(x3, bad_y), std::invalid_argument);
    CHECK_THROWS_AS(make_kernel<Pad2dKernel>(be.ctx(), Pad2dParams{-1, 0, 0, 0}), std::invalid_argument);
  }
}
