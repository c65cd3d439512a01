// dense and activation tests: forward/backward against float64 references, shape errors, in-place use.
#include "core/ops/activation.h"
#include "core/ops/dense.h"
#include "test_util.h"

using namespace trainer;
using namespace trainer::test;

TEST_CASE("dense forward and backward match float64 reference") {
  std::mt19937_64 rng(31);
  struct Case {
    int64_t n, k, u;
    bool bias, dx;
  };
  std::vector<Case> cases = {{1, 1, 1, true, true},     {3, 5, 7, true, true},    {64, 336, 10, true, true},
                             {17, 33, 65, false, true}, {5, 128, 3, true, false}, {1, 100, 200, true, true}};
  for (int i = 0; i < 10; ++i)
    cases.push_back({uniform_int(rng, 1, 40), uniform_int(rng, 1, 70), uniform_int(rng, 1, 50),
                     uniform_int(rng, 0, 1) == 1, uniform_int(rng, 0, 3) != 0});
  for (const auto& c : cases) {
    INFO("x " << c.n << "x" << c.k << " -> " << c.u << (c.bias ? "" : ", no bias") << (c.dx ? "" : ", no dx"));
    auto kernel = make_kernel<DenseKernel>(cpu_ctx(), DenseParams{c.u, c.bias});
    Tensor x = random_tensor({c.n, c.k}, rng), w = random_tensor({c.k, c.u}, rng);
    Tensor b = c.bias ? random_tensor({c.u}, rng) : Tensor();
    Tensor y = cpu_ctx().empty({c.n, c.u});
    poison(y);
    kernel->forward(x, w, b, y);
    ref::Vec bv = c.bias ? to_vec(b) : ref::Vec();
    check_close("y", y, ref::dense_forward(to_vec(x), to_vec(w), c.bias ? &bv : nullptr, c.n, c.k, c.u));
    Tensor dy = random_tensor(y.shape(), rng);
    Tensor dx = c.dx ? cpu_ctx().empty(x.shape()) : Tensor(), dw = cpu_ctx().empty(w.shape());
    Tensor db = c.bias ? cpu_ctx().empty({c.u}) : Tensor();
    if (c.dx) poison(dx);
    poison(dw);
    if (c.bias) poison(db);
    kernel->backward(x, w, dy, dx, dw, db);
    ref::Vec rdx, rdw, rdb;
    ref::dense_backward(to_vec(x), to_vec(w), to_vec(dy), c.n, c.k, c.u, rdx, rdw, rdb);
    if (c.dx) check_close("dx", dx, rdx);
    check_close("dw", dw, rdw);
    if (c.bias) check_close("db", db, rdb);
  }
}

TEST_CASE("dense applies to the last axis of higher-rank inputs") {
  std::mt19937_64 rng(32);
  auto kernel = make_kernel<DenseKernel>(cpu_ctx(), DenseParams{6, true});
  Tensor x = random_tensor({2, 3, 4}, rng), w = random_tensor({4, 6}, rng), b = random_tensor({6}, rng);
  Tensor y = cpu_ctx().empty({2, 3, 6});
  kernel->forward(x, w, b, y);
  ref::Vec bv = to_vec(b);
  check_close("y", y, ref::dense_forward(to_vec(x), to_vec(w), &bv, 6, 4, 6));
}

TEST_CASE("dense handles an empty batch and rejects mismatched shapes") {
  std::mt19937_64 rng(33);
  auto kernel = make_kernel<DenseKernel>(cpu_ctx(), DenseParams{4, true});
  Tensor w = random_tensor({3, 4}, rng), b = random_tensor({4}, rng);
  Tensor x0 = cpu_ctx().empty({0, 3}), y0 = cpu_ctx().empty({0, 4});
  REQUIRE_NOTHROW(kernel->forward(x0, w, b, y0));
  Tensor dw = random_tensor({3, 4}, rng), db = random_tensor({4}, rng), dx0 = cpu_ctx().empty({0, 3});
  REQUIRE_NOTHROW(kernel->backward(x0, w, y0, dx0, dw, db));
  check_close("dw", dw, ref::Vec(12, 0.0), 0.0);
  check_close("db", db, ref::Vec(4, 0.0), 0.0);
  Tensor x = random_tensor({2, 5}, rng), y = cpu_ctx().empty({2, 4});
  CHECK_THROWS_AS(kernel->forward(x, w, b, y), std::invalid_argument);
  Tensor x3 = random_tensor({2, 3}, rng), bad_y = cpu_ctx().empty({2, 5});
  CHECK_THROWS_AS(kernel->forward(x3, w, b, bad_y), std::invalid_argument);
}

TEST_CASE("activation forward and backward match float64 reference for every kind") {
  std::mt19937_64 rng(34);
  for (int kind = 0; kind < 5; ++kind) {
    INFO("activation " << activation_name(ActKind(kind)));
    auto k = make_kernel<ActivationKernel>(cpu_ctx(), ActivationParams{ActKind(kind)});
    for (Shape s : {Shape{1}, Shape{3, 7}, Shape{2, 5, 5, 13}, Shape{64, 16, 16, 32}, Shape{0, 4}}) {
      INFO("shape [" << s.str() << "]");
      Tensor x = random_tensor(s, rng, -8.0, 8.0);  // spans relu6's upper knee and sigmoid/tanh saturation
      Tensor y = cpu_ctx().empty(s);
      poison(y);
      k->forward(x, y);
      ref::Vec xv = to_vec(x);
      check_close("y", y, ref::activation_forward(kind, xv));
      Tensor dy = random_tensor(s, rng), dx = cpu_ctx().empty(s);
      poison(dx);
      k->backward(x, y, dy, dx);
      check_close("dx", dx, ref::activation_backward(kind, xv, to_vec(dy)));
      // In place: y over x, dx over dy.
      ref::Vec want_y = ref::activation_forward(kind, xv), want_dx = ref::activation_backward(kind, xv, to_vec(dy));
      k->forward(x, x);
      check_close("y in place", x, want_y);
      Tensor xs = from_vec(s, xv);
      k->backward(xs, x, dy, dy);
      check_close("dx in place", dy, want_dx);
    }
  }
}

TEST_CASE("activation sigmoid stays finite for large inputs; shape mismatch throws") {
  auto k = make_kernel<ActivationKernel>(cpu_ctx(), ActivationParams{ActKind::Sigmoid});
  Tensor x = from_vec({4}, {-1000.0, -90.0, 90.0, 1000.0}), y = cpu_ctx().empty({4});
  k->forward(x, y);
  check_close("y", y, {0.0, 0.0, 1.0, 1.0});
  Tensor bad = cpu_ctx().empty({5});
  CHECK_THROWS_AS(k->forward(x, bad), std::invalid_argument);
  CHECK(parse_activation("relu6") == ActKind::Relu6);
}
