// dense and activation tests: forward/backward against float64 references, shape errors, in-place use.
#include "backends.h"
#include "core/ops/activation.h"
#include "core/ops/dense.h"

using namespace trainer;
using namespace trainer::test;

TEST_CASE("dense forward and backward match float64 reference", "[backends]") {
  struct Case {
    int64_t n, k, u;
    bool bias, dx;
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(31);
    std::vector<Case> cases = {{1, 1, 1, true, true},     {3, 5, 7, true, true},    {64, 336, 10, true, true},
                               {17, 33, 65, false, true}, {5, 128, 3, true, false}, {1, 100, 200, true, true}};
    for (int i = 0; i < 10; ++i)
      cases.push_back({uniform_int(rng, 1, 40), uniform_int(rng, 1, 70), uniform_int(rng, 1, 50),
                       uniform_int(rng, 0, 1) == 1, uniform_int(rng, 0, 3) != 0});
    for (const auto& c : cases) {
      INFO("x " << c.n << "x" << c.k << " -> " << c.u << (c.bias ? "" : ", no bias") << (c.dx ? "" : ", no dx"));
      auto kernel = make_kernel<DenseKernel>(be.ctx(), DenseParams{c.u, c.bias});
      Tensor hx = random_tensor({c.n, c.k}, rng), hw = random_tensor({c.k, c.u}, rng);
      Tensor hb = c.bias ? random_tensor({c.u}, rng) : Tensor();
      Tensor x = be.upload(hx), w = be.upload(hw), b = be.upload(hb);
      Tensor y = be.nan({c.n, c.u});
      kernel->forward(x, w, b, y);
      ref::Vec bv = c.bias ? to_vec(hb) : ref::Vec();
      be.check("y", y, ref::dense_forward(to_vec(hx), to_vec(hw), c.bias ? &bv : nullptr, c.n, c.k, c.u));
      Tensor hdy = random_tensor(y.shape(), rng), dy = be.upload(hdy);
      Tensor dx = c.dx ? be.nan(x.shape()) : Tensor(), dw = be.nan(w.shape());
      Tensor db = c.bias ? be.nan({c.u}) : Tensor();
      kernel->backward(x, w, dy, dx, dw, db);
      ref::Vec rdx, rdw, rdb;
      ref::dense_backward(to_vec(hx), to_vec(hw), to_vec(hdy), c.n, c.k, c.u, rdx, rdw, rdb);
      if (c.dx) be.check("dx", dx, rdx);
      be.check("dw", dw, rdw);
      if (c.bias) be.check("db", db, rdb);
    }
  }
}

TEST_CASE("dense applies to the last axis of higher-rank inputs", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(32);
    auto kernel = make_kernel<DenseKernel>(be.ctx(), DenseParams{6, true});
    Tensor hx = random_tensor({2, 3, 4}, rng), hw = random_tensor({4, 6}, rng), hb = random_tensor({6}, rng);
    Tensor y = be.nan({2, 3, 6});
    kernel->forward(be.upload(hx), be.upload(hw), be.upload(hb), y);
    ref::Vec bv = to_vec(hb);
    be.check("y", y, ref::dense_forward(to_vec(hx), to_vec(hw), &bv, 6, 4, 6));
  }
}

TEST_CASE("dense handles an empty batch and rejects mismatched shapes", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(33);
    auto kernel = make_kernel<DenseKernel>(be.ctx(), DenseParams{4, true});
    Tensor w = be.upload(random_tensor({3, 4}, rng)), b = be.upload(random_tensor({4}, rng));
    Tensor x0 = be.empty({0, 3}), y0 = be.empty({0, 4});
    REQUIRE_NOTHROW(kernel->forward(x0, w, b, y0));
    Tensor dw = be.upload(random_tensor({3, 4}, rng)), db = be.upload(random_tensor({4}, rng));
    Tensor dx0 = be.empty({0, 3});
    REQUIRE_NOTHROW(kernel->backward(x0, w, y0, dx0, dw, db));
    be.check("dw", dw, ref::Vec(12, 0.0), 0.0);
    be.check("db", db, ref::Vec(4, 0.0), 0.0);
    Tensor x = be.upload(random_tensor({2, 5}, rng)), y = be.empty({2, 4});
    CHECK_THROWS_AS(kernel->forward(x, w, b, y), std::invalid_argument);
    Tensor x3 = be.upload(random_tensor({2, 3}, rng)), bad_y = be.empty({2, 5});
    CHECK_THROWS_AS(kernel->forward(x3, w, b, bad_y), std::invalid_argument);
  }
}

TEST_CASE("activation forward and backward match float64 reference for every kind", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(34);
    for (int kind = 0; activation_names()[kind]; ++kind) {  // every ActKind, in order
      // leaky_relu's slope and elu's alpha other than the defaults (0 for the others: unused).
      const float alpha = ActKind(kind) == ActKind::LeakyRelu ? 0.3f : ActKind(kind) == ActKind::Elu ? 0.7f : 0.0f;
      INFO("activation " << activation_name(ActKind(kind)) << ", alpha " << alpha);
      auto k = make_kernel<ActivationKernel>(be.ctx(), ActivationParams{ActKind(kind), alpha});
      for (Shape s : {Shape{1}, Shape{3, 7}, Shape{2, 5, 5, 13}, Shape{64, 16, 16, 32}, Shape{0, 4}}) {
        INFO("shape [" << s.str() << "]");
        Tensor hx = random_tensor(s, rng, -8.0, 8.0);  // spans relu6's upper knee, sigmoid/tanh saturation, gelu's dip
        Tensor x = be.upload(hx), y = be.nan(s);
        k->forward(x, y);
        ref::Vec xv = to_vec(hx);
        ref::Vec want_y = ref::activation_forward(kind, xv, alpha);
        be.check("y", y, want_y);
        Tensor hdy = random_tensor(s, rng), dy = be.upload(hdy), dx = be.nan(s);
        k->backward(x, y, dy, dx);
        ref::Vec want_dx = ref::activation_backward(kind, xv, to_vec(hdy), alpha);
        be.check("dx", dx, want_dx);
        // In place: y over x, dx over dy.
        k->forward(x, x);
        be.check("y in place", x, want_y);
        Tensor xs = be.upload(hx);
        k->backward(xs, x, dy, dy);
        be.check("dx in place", dy, want_dx);
      }
    }
  }
}

TEST_CASE("activation sigmoid stays finite for large inputs, shape mismatch throws", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<ActivationKernel>(be.ctx(), ActivationParams{ActKind::Sigmoid});
    Tensor x = be.upload(from_vec({4}, {-1000.0, -90.0, 90.0, 1000.0})), y = be.nan({4});
    k->forward(x, y);
    be.check("y", y, {0.0, 0.0, 1.0, 1.0});
    Tensor bad = be.empty({5});
    CHECK_THROWS_AS(k->forward(x, bad), std::invalid_argument);
  }
  CHECK(parse_activation("relu6") == ActKind::Relu6);
  CHECK(parse_activation("gelu") == ActKind::Gelu);
  CHECK(parse_activation("gelu_tanh") == ActKind::GeluTanh);
  CHECK(parse_activation("silu") == ActKind::Silu);
  CHECK(parse_activation("swish") == ActKind::Silu);
  CHECK(backward_reads_x(ActKind::Silu));
  CHECK(parse_activation("hard_swish") == ActKind::HardSilu);
  CHECK(parse_activation("leaky_relu") == ActKind::LeakyRelu);
  CHECK(parse_activation("mish") == ActKind::Mish);
  CHECK(backward_reads_y(ActKind::LeakyRelu));  // in place, as relu
  CHECK(backward_reads_x(ActKind::Elu));
  CHECK(default_alpha(ActKind::LeakyRelu) == 0.2f);  // keras.activations.leaky_relu's
  CHECK(default_alpha(ActKind::Elu) == 1.0f);
  CHECK(backward_reads_x(ActKind::Gelu));
  CHECK_FALSE(backward_reads_y(ActKind::GeluTanh));
}
