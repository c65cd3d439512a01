// batchnorm tests: training/inference forward, running statistics and backward against float64 references.
#include "core/ops/batchnorm.h"

#include "backends.h"

using namespace trainer;
using namespace trainer::test;

namespace {

struct BnTensors {
  Tensor x, gamma, beta, rm, rv;
};

BnTensors make_inputs(const Shape& s, std::mt19937_64& rng, double offset) {
  int64_t C = s.back();
  BnTensors t;
  t.x = random_tensor(s, rng, offset - 2.0, offset + 2.0);
  t.gamma = random_tensor({C}, rng, 0.5, 1.5);
  t.beta = random_tensor({C}, rng, -0.5, 0.5);
  t.rm = random_tensor({C}, rng, -0.2, 0.2);
  t.rv = random_tensor({C}, rng, 0.5, 1.5);
  return t;
}

BnTensors upload(const Backend& be, const BnTensors& h) {
  return {be.upload(h.x), be.upload(h.gamma), be.upload(h.beta), be.upload(h.rm), be.upload(h.rv)};
}

void check_train(const Backend& be, const Shape& s, double offset, std::mt19937_64& rng, bool unbiased) {
  INFO("x [" << s.str() << "], values around " << offset << (unbiased ? ", unbiased" : ", biased") << " moving variance");
  BatchNormParams p;
  p.momentum = 0.9f;
  p.epsilon = 1e-3f;
  p.unbiased_moving_variance = unbiased;
  auto k = make_kernel<BatchNormKernel>(be.ctx(), p);
  int64_t C = s.back(), m = s.numel() / C;
  BnTensors h = make_inputs(s, rng, offset), t = upload(be, h);
  ref::BnTrain want = ref::batchnorm_train(to_vec(h.x), m, C, to_vec(h.gamma), to_vec(h.beta), to_vec(h.rm),
                                           to_vec(h.rv), p.momentum, p.epsilon, unbiased);
  Tensor y = be.nan(s), mean = be.nan({C}), invstd = be.nan({C});
  k->forward_train(t.x, t.gamma, t.beta, y, mean, invstd, t.rm, t.rv);
  be.check("y", y, want.y);
  be.check("save_mean", mean, want.mean);
  be.check("save_invstd", invstd, want.invstd);
  be.check("running_mean", t.rm, want.running_mean);
  be.check("running_var", t.rv, want.running_var);

  Tensor hdy = random_tensor(s, rng), dy = be.upload(hdy);
  Tensor dx = be.nan(s), dgamma = be.nan({C}), dbeta = be.nan({C});
  k->backward(t.x, Tensor(), t.gamma, dy, mean, invstd, dx, dgamma, dbeta);
  ref::Vec rdx, rdg, rdb;
  ref::batchnorm_backward(to_vec(h.x), m, C, to_vec(h.gamma), to_vec(hdy), p.epsilon, rdx, rdg, rdb);
  be.check("dx", dx, rdx);
  be.check("dgamma", dgamma, rdg);
  be.check("dbeta", dbeta, rdb);

  Tensor none;  // dx may be undefined
  Tensor dg2 = be.nan({C}), db2 = be.nan({C});
  k->backward(t.x, Tensor(), t.gamma, dy, mean, invstd, none, dg2, db2);
  be.check("dgamma without dx", dg2, rdg);
  be.check("dbeta without dx", db2, rdb);
}

}  // namespace

TEST_CASE("batchnorm training forward and backward match float64 reference", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(11);
    for (bool unbiased : {false, true}) {  // the moving variance of Keras 3 (biased) and of PyTorch
      check_train(be, {2, 5, 7, 3}, 0.0, rng, unbiased);
      check_train(be, {1, 3, 3, 1}, 0.5, rng, unbiased);  // batch 1, one channel
      check_train(be, {4, 9, 7, 13}, 0.0, rng, unbiased);
      check_train(be, {64, 8, 8, 32}, 1.0, rng, unbiased);  // many rows: several reduction chunks, threads
      check_train(be, {16, 15, 15, 80}, 0.0, rng, unbiased);
      check_train(be, {33, 10}, 0.0, rng, unbiased);        // 2-D [N, C] (after a dense layer)
      check_train(be, {2, 17}, -3.0, rng, unbiased);        // two samples
      check_train(be, {8, 6, 6, 5}, 100.0, rng, unbiased);  // |mean| >> std: the one-pass variance must stay accurate
    }
  }
}

TEST_CASE("batchnorm running statistics follow several training steps", "[backends]") {
  BatchNormParams p;  // Keras defaults: momentum 0.99, epsilon 1e-3
  Shape s{3, 4, 5, 6};
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(12);
    auto k = make_kernel<BatchNormKernel>(be.ctx(), p);
    BnTensors h = make_inputs(s, rng, 0.3), t = upload(be, h);
    ref::Vec rm = to_vec(h.rm), rv = to_vec(h.rv);
    Tensor y = be.empty(s), mean = be.empty({6}), invstd = be.empty({6});
    for (int step = 0; step < 5; ++step) {
      Tensor hx = random_tensor(s, rng, -1.0 + step, 2.0 + step);
      k->forward_train(be.upload(hx), t.gamma, t.beta, y, mean, invstd, t.rm, t.rv);
      ref::BnTrain want = ref::batchnorm_train(to_vec(hx), s.numel() / 6, 6, to_vec(h.gamma), to_vec(h.beta), rm, rv,
                                               p.momentum, p.epsilon);
      rm = want.running_mean, rv = want.running_var;
    }
    be.check("running_mean", t.rm, rm);
    be.check("running_var", t.rv, rv);
  }
}

TEST_CASE("batchnorm inference uses the running statistics", "[backends]") {
  BatchNormParams p;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(13);
    auto k = make_kernel<BatchNormKernel>(be.ctx(), p);
    for (Shape s : {Shape{2, 3, 4, 5}, Shape{7, 11}, Shape{64, 4, 4, 96}}) {
      BnTensors h = make_inputs(s, rng, 0.0), t = upload(be, h);
      int64_t C = s.back();
      Tensor y = be.nan(s);
      k->forward_infer(t.x, t.gamma, t.beta, t.rm, t.rv, y);
      be.check("y", y,
               ref::batchnorm_infer(to_vec(h.x), s.numel() / C, C, to_vec(h.gamma), to_vec(h.beta), to_vec(h.rm),
                                    to_vec(h.rv), p.epsilon));
    }
  }
}

TEST_CASE("batchnorm reference gradient agrees with finite differences") {
  // Host only (no kernel runs): validates the analytical reference itself: L = sum(dy * bn(x)),
  // central differences in double.
  std::mt19937_64 rng(14);
  int64_t m = 6, C = 3;
  double eps = 1e-3;
  ref::Vec x(m * C), g(C), b(C), dy(m * C), rm(C, 0.0), rv(C, 1.0);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto* v : {&x, &g, &b, &dy})
    for (auto& e : *v) e = u(rng);
  auto loss = [&](const ref::Vec& xx, const ref::Vec& gg, const ref::Vec& bb) {
    ref::Vec y = ref::batchnorm_train(xx, m, C, gg, bb, rm, rv, 0.9, eps).y;
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += dy[i] * y[i];
    return s;
  };
  ref::Vec dx, dg, db;
  ref::batchnorm_backward(x, m, C, g, dy, eps, dx, dg, db);
  const double h = 1e-6;
  auto fd = [&](ref::Vec& v, size_t i) {
    double keep = v[i];
    v[i] = keep + h;
    double lp = loss(x, g, b);
    v[i] = keep - h;
    double lm = loss(x, g, b);
    v[i] = keep;
    return (lp - lm) / (2 * h);
  };
  for (size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(fd(x, i) - dx[i]) < 1e-6);
  for (size_t c = 0; c < size_t(C); ++c) {
    CHECK(std::fabs(fd(g, c) - dg[c]) < 1e-6);
    CHECK(std::fabs(fd(b, c) - db[c]) < 1e-6);
  }
}

TEST_CASE("batchnorm handles an empty batch and rejects mismatched shapes", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(15);
    auto k = make_kernel<BatchNormKernel>(be.ctx(), BatchNormParams{});
    BnTensors h = make_inputs({1, 2, 2, 4}, rng, 0.0), t = upload(be, h);
    Tensor x0 = be.empty({0, 2, 2, 4}), y0 = be.empty({0, 2, 2, 4});
    Tensor mean = be.empty({4}), invstd = be.empty({4});
    REQUIRE_NOTHROW(k->forward_train(x0, t.gamma, t.beta, y0, mean, invstd, t.rm, t.rv));
    be.check("running_mean untouched", t.rm, to_vec(h.rm), 0.0);
    REQUIRE_NOTHROW(k->forward_infer(x0, t.gamma, t.beta, t.rm, t.rv, y0));
    Tensor dg = be.upload(random_tensor({4}, rng)), db = be.upload(random_tensor({4}, rng));
    REQUIRE_NOTHROW(k->backward(x0, Tensor(), t.gamma, y0, mean, invstd, y0, dg, db));
    be.check("dgamma", dg, ref::Vec(4, 0.0), 0.0);

    Tensor y = be.empty({1, 2, 2, 4});
    Tensor bad = be.upload(random_tensor({5}, rng));
    CHECK_THROWS_AS(k->forward_train(t.x, bad, t.beta, y, mean, invstd, t.rm, t.rv), std::invalid_argument);
    Tensor bad_y = be.empty({1, 2, 2, 5});
    CHECK_THROWS_AS(k->forward_infer(t.x, t.gamma, t.beta, t.rm, t.rv, bad_y), std::invalid_argument);
  }
}

TEST_CASE("batchnorm statistics and gradients are bit-identical from run to run") {
  // CPU only: bit-exact resume is a CPU promise (DESIGN.md); GPU reductions may use atomics.
  std::mt19937_64 rng(16);
  auto k = make_kernel<BatchNormKernel>(cpu_ctx(), BatchNormParams{});
  Shape s{32, 9, 9, 40};
  BnTensors t = make_inputs(s, rng, 0.5);
  Tensor dy = random_tensor(s, rng);
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    Tensor rm = from_vec({40}, to_vec(t.rm)), rv = from_vec({40}, to_vec(t.rv));
    Tensor y = cpu_ctx().empty(s), mean = cpu_ctx().empty({40}), is = cpu_ctx().empty({40});
    Tensor dx = cpu_ctx().empty(s), dg = cpu_ctx().empty({40}), db = cpu_ctx().empty({40});
    k->forward_train(t.x, t.gamma, t.beta, y, mean, is, rm, rv);
    k->backward(t.x, Tensor(), t.gamma, dy, mean, is, dx, dg, db);
    std::vector<float> all;
    for (Tensor* v : {&y, &mean, &is, &rm, &rv, &dx, &dg, &db}) all.insert(all.end(), v->f32(), v->f32() + v->numel());
    runs.push_back(std::move(all));
  }
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
}
