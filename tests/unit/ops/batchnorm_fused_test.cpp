// Batch norm with a fused ReLU/ReLU6 on every backend: bit for bit batch norm followed by the activation kernel, forward and backward, f32 and low precision.
#include "core/ops/activation.h"
#include "core/ops/batchnorm.h"

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

struct Outputs {
  Tensor y, mean, invstd, rm, rv, dx, dgamma, dbeta, y_infer;
};

// Training forward, backward and inference forward of batch norm on x and dy (type dt), with the
// activation either fused into the kernel or run after it by the activation kernel (in place,
// as the graph runs it unfused).
Outputs run(const Backend& be, ActKind act, bool fused, const Shape& s, DType dt, const ref::Vec& x,
            const ref::Vec& dy, const Tensor& gamma_h, const Tensor& beta_h) {
  const int64_t C = s.back();
  BatchNormParams p;
  p.momentum = 0.9f;
  if (fused) p.activation = act;
  auto bn = make_kernel<BatchNormKernel>(be.ctx(), p);
  auto a = make_kernel<ActivationKernel>(be.ctx(), ActivationParams{act});
  Outputs o{nan_of(s, dt), nan_of({C}, DType::F32), nan_of({C}, DType::F32), make({C}, DType::F32, ref::Vec(size_t(C), 0.1)),
            make({C}, DType::F32, ref::Vec(size_t(C), 1.2)), nan_of(s, dt), nan_of({C}, DType::F32),
            nan_of({C}, DType::F32), nan_of(s, dt)};
  auto all = {&o.y, &o.mean, &o.invstd, &o.rm, &o.rv, &o.dx, &o.dgamma, &o.dbeta, &o.y_infer};
  for (Tensor* t : all) *t = be.upload(*t);
  Tensor xt = be.upload(make(s, dt, x)), g = be.upload(make(s, dt, dy));
  Tensor gamma = be.upload(gamma_h), beta = be.upload(beta_h);
  bn->forward_train(xt, gamma, beta, o.y, o.mean, o.invstd, o.rm, o.rv);
  if (!fused) a->forward(o.y, o.y);
  if (!fused) a->backward(o.y, o.y, g, g);
  bn->backward(xt, o.y, gamma, g, o.mean, o.invstd, o.dx, o.dgamma, o.dbeta);
  bn->forward_infer(xt, gamma, beta, o.rm, o.rv, o.y_infer);
  if (!fused) a->forward(o.y_infer, o.y_infer);
  for (Tensor* t : all) *t = be.download(*t);
  return o;
}

// Fused and unfused batch norm give the same bits on `be` in type dt, relu and relu6 alike.
void check_fused_equals_separate(const Backend& be, DType dt) {
  std::mt19937_64 rng(5);
  for (ActKind act : {ActKind::Relu, ActKind::Relu6}) {
    for (const Shape& s : {Shape{4, 7, 7, 16}, Shape{64, 8, 8, 32}, Shape{33, 10}}) {
      INFO(activation_name(act) << ", " << dtype_name(dt) << ", x [" << s.str() << "]");
      const int64_t C = s.back();
      ref::Vec x = random_values(s, rng, dt, -3, 3), dy = random_values(s, rng, dt);
      // gamma up to 6: a good part of the outputs pass relu6's cap of 6, and some are clamped to 0.
      Tensor gamma = random_tensor({C}, rng, 1.0, 6.0), beta = random_tensor({C}, rng, -1.0, 1.0);
      Outputs f = run(be, act, true, s, dt, x, dy, gamma, beta), u = run(be, act, false, s, dt, x, dy, gamma, beta);
      CHECK(same_bits(f.y, u.y));
      CHECK(same_bits(f.y_infer, u.y_infer));
      CHECK(same_bits(f.mean, u.mean));
      CHECK(same_bits(f.invstd, u.invstd));
      CHECK(same_bits(f.rm, u.rm));
      CHECK(same_bits(f.rv, u.rv));
      CHECK(same_bits(f.dx, u.dx));
      CHECK(same_bits(f.dgamma, u.dgamma));
      CHECK(same_bits(f.dbeta, u.dbeta));
      // The clamps were exercised: zeros, and for relu6 values at the cap.
      int64_t zeros = 0, capped = 0;
      for (int64_t i = 0; i < f.y.numel(); ++i) {
        zeros += value(f.y, i) == 0.0;
        capped += value(f.y, i) == 6.0;
      }
      CHECK(zeros > 0);
      if (act == ActKind::Relu6) CHECK(capped > 0);
    }
  }
}

// The CPU's backward decides the activation's gate from the coefficients its last training
// forward kept (f32 and bf16); a backward whose statistics come from another forward (another
// tensor) reads y instead. Both give what a kernel that ran only that forward gives, bit for bit.
void check_backward_uses_own_forward(const Backend& be, DType dt) {
  INFO(dtype_name(dt));
  std::mt19937_64 rng(6);
  const Shape s{8, 5, 5, 24};
  const int64_t C = s.back();
  BatchNormParams p;
  p.activation = ActKind::Relu6;
  Tensor gamma = be.upload(random_tensor({C}, rng, 1.0, 6.0)), beta = be.upload(random_tensor({C}, rng, -1.0, 1.0));
  auto rm = [&] { return be.upload(make({C}, DType::F32, ref::Vec(size_t(C), 0.0))); };
  auto rv = [&] { return be.upload(make({C}, DType::F32, ref::Vec(size_t(C), 1.0))); };
  Tensor xa = be.upload(make(s, dt, random_values(s, rng, dt, -3, 3)));
  Tensor xb = be.upload(make(s, dt, random_values(s, rng, dt, -3, 3)));
  Tensor dy = be.upload(make(s, dt, random_values(s, rng, dt)));
  auto fresh = [&] { return be.upload(make(s, dt, ref::Vec(size_t(s.numel()), 0.0))); };
  auto stat = [&] { return be.upload(make({C}, DType::F32, ref::Vec(size_t(C), 0.0))); };
  // Alone: forward a, backward a.
  auto k1 = make_kernel<BatchNormKernel>(be.ctx(), p);
  Tensor ya = fresh(), ma = stat(), ia = stat(), dx1 = fresh(), dg1 = stat(), db1 = stat(), rm1 = rm(), rv1 = rv();
  k1->forward_train(xa, gamma, beta, ya, ma, ia, rm1, rv1);
  k1->backward(xa, ya, gamma, dy, ma, ia, dx1, dg1, db1);
  // Interleaved: forward a, forward b (other statistics tensors), backward a, then backward b.
  auto k2 = make_kernel<BatchNormKernel>(be.ctx(), p);
  Tensor ya2 = fresh(), ma2 = stat(), ia2 = stat(), yb = fresh(), mb = stat(), ib = stat(), rm2 = rm(), rv2 = rv();
  Tensor dx2 = fresh(), dg2 = stat(), db2 = stat(), dxb = fresh(), dgb = stat(), dbb = stat();
  k2->forward_train(xa, gamma, beta, ya2, ma2, ia2, rm2, rv2);
  k2->forward_train(xb, gamma, beta, yb, mb, ib, rm2, rv2);
  k2->backward(xa, ya2, gamma, dy, ma2, ia2, dx2, dg2, db2);
  k2->backward(xb, yb, gamma, dy, mb, ib, dxb, dgb, dbb);
  // b alone, for its backward.
  auto k3 = make_kernel<BatchNormKernel>(be.ctx(), p);
  Tensor yb3 = fresh(), mb3 = stat(), ib3 = stat(), dx3 = fresh(), dg3 = stat(), db3 = stat(), rm3 = rm(), rv3 = rv();
  k3->forward_train(xb, gamma, beta, yb3, mb3, ib3, rm3, rv3);
  k3->backward(xb, yb3, gamma, dy, mb3, ib3, dx3, dg3, db3);
  for (auto [got, want] :
       {std::pair{&dx2, &dx1}, {&dg2, &dg1}, {&db2, &db1}, {&dxb, &dx3}, {&dgb, &dg3}, {&dbb, &db3}})
    CHECK(same_bits(be.download(*got), be.download(*want)));
}

}  // namespace

TEST_CASE("batchnorm with a fused relu or relu6 is bit for bit batch norm then the activation, f32", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) check_fused_equals_separate(be, DType::F32);
}

TEST_CASE("batchnorm with a fused relu or relu6 is bit for bit batch norm then the activation, low precision", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) check_fused_equals_separate(*lo.be, lo.type);
}

TEST_CASE("batchnorm fuses only relu and relu6, and its synchronised pieces take no fused activation", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto plain = make_kernel<BatchNormKernel>(be.ctx(), BatchNormParams{});
    CHECK(plain->can_fuse(ActKind::Relu));
    CHECK(plain->can_fuse(ActKind::Relu6));
    CHECK_FALSE(plain->can_fuse(ActKind::Sigmoid));
    CHECK_FALSE(plain->can_fuse(ActKind::Tanh));
    BatchNormParams sig;
    sig.activation = ActKind::Sigmoid;
    CHECK_THROWS_AS(make_kernel<BatchNormKernel>(be.ctx(), sig), std::invalid_argument);
    BatchNormParams relu;
    relu.activation = ActKind::Relu;
    auto k = make_kernel<BatchNormKernel>(be.ctx(), relu);
    Tensor x = be.upload(from_vec({8, 4}, ref::Vec(32, 1.0))), v = be.upload(from_vec({4}, ref::Vec(4, 1.0)));
    Tensor dx = be.empty({8, 4});
    CHECK_THROWS_AS(k->backward_sums(x, x, v, v, v), std::invalid_argument);
    Tensor count = be.upload(from_vec({1}, {8.0}));
    CHECK_THROWS_AS(k->backward_apply(x, x, v, v, v, v, v, count, dx), std::invalid_argument);
    // Backward needs forward's output y with a fused activation.
    CHECK_THROWS_AS(k->backward(x, Tensor(), v, x, v, v, dx, v, v), std::invalid_argument);
  }
}

TEST_CASE("batchnorm with a fused relu6: a backward after another training forward uses its own forward's y", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) check_backward_uses_own_forward(be, DType::F32);
}

TEST_CASE("batchnorm with a fused relu6 in low precision: a backward after another training forward uses its own forward's y", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) check_backward_uses_own_forward(*lo.be, lo.type);
}
