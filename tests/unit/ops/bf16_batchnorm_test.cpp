// Low-precision batchnorm on every backend: x, y, dy, dx in bf16 or f16 (parameters and statistics f32) against float64 and the f32 path.
#include "core/ops/batchnorm.h"

#include <tuple>

#include "bf16_check.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::bf16_check;

namespace {

struct BnRun {
  Tensor y, mean, invstd, rm, rv, dx, dgamma, dbeta;
};

// forward_train then backward on backend `be` with x and dy of type dt (values x, dy), the rest
// f32 (host tensors in and out).
BnRun bn_train(const Backend& be, BatchNormKernel& k, const Shape& s, DType dt, const ref::Vec& x, const ref::Vec& dy,
               const Tensor& gamma, const Tensor& beta, const Tensor& rm, const Tensor& rv) {
  int64_t C = s.back();
  BnRun r{be.upload(nan_of(s, dt)), be.upload(nan_of({C}, DType::F32)), be.upload(nan_of({C}, DType::F32)),
          be.upload(rm), be.upload(rv), be.upload(nan_of(s, dt)), be.upload(nan_of({C}, DType::F32)),
          be.upload(nan_of({C}, DType::F32))};
  Tensor xt = be.upload(make(s, dt, x)), dyt = be.upload(make(s, dt, dy)), g = be.upload(gamma), b = be.upload(beta);
  k.forward_train(xt, g, b, r.y, r.mean, r.invstd, r.rm, r.rv);
  k.backward(xt, Tensor(), g, dyt, r.mean, r.invstd, r.dx, r.dgamma, r.dbeta);
  for (Tensor* t : {&r.y, &r.mean, &r.invstd, &r.rm, &r.rv, &r.dx, &r.dgamma, &r.dbeta}) *t = be.download(*t);
  return r;
}

}  // namespace

TEST_CASE("low-precision batchnorm training forward and backward match float64 within one rounding of the f32 path", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    const Backend& be = *lo.be;
    const DType L = lo.type;
    const double u = lo.u(), tol = be.tol;
    BatchNormParams p;
    p.momentum = 0.9f;
    p.epsilon = 1e-3f;
    auto k = make_kernel<BatchNormKernel>(lo.ctx(), p);
    std::mt19937_64 rng(101);
    struct Case {
      Shape s;
      double offset;
    };
    for (const Case& cs : {Case{{2, 5, 7, 3}, 0.0}, Case{{1, 3, 3, 1}, 0.5}, Case{{64, 8, 8, 32}, 1.0},
                           Case{{16, 15, 15, 80}, 0.0}, Case{{33, 10}, 0.0}, Case{{8, 6, 6, 5}, 100.0}}) {
      INFO("x [" << cs.s.str() << "], values around " << cs.offset);
      int64_t C = cs.s.back(), m = cs.s.numel() / C;
      ref::Vec x = random_values(cs.s, rng, L, cs.offset - 2, cs.offset + 2);
      ref::Vec dy = random_values(cs.s, rng, L);
      Tensor gamma = random_tensor({C}, rng, 0.5, 1.5), beta = random_tensor({C}, rng, -0.5, 0.5);
      Tensor rm = random_tensor({C}, rng, -0.2, 0.2), rv = random_tensor({C}, rng, 0.5, 1.5);
      BnRun b = bn_train(be, *k, cs.s, L, x, dy, gamma, beta, rm, rv);

      // Against float64 on the same (low-precision) values: [C] results within the f32 tests' bound
      // (the arithmetic is the f32 path's); y and dx within that bound plus one rounding.
      ref::BnTrain want = ref::batchnorm_train(x, m, C, to_vec(gamma), to_vec(beta), to_vec(rm), to_vec(rv), p.momentum,
                                               p.epsilon);
      check_bound("y", b.y, want.y, u, (1 + u) * tol * max_abs_or_1(want.y));
      check_close("save_mean", b.mean, want.mean, tol);
      check_close("save_invstd", b.invstd, want.invstd, tol);
      check_close("running_mean", b.rm, want.running_mean, tol);
      check_close("running_var", b.rv, want.running_var, tol);
      ref::Vec rdx, rdg, rdb;
      ref::batchnorm_backward(x, m, C, to_vec(gamma), dy, p.epsilon, rdx, rdg, rdb);
      check_bound("dx", b.dx, rdx, u, (1 + u) * tol * max_abs_or_1(rdx));
      check_close("dgamma", b.dgamma, rdg, tol);
      check_close("dbeta", b.dbeta, rdb, tol);

      // Against the f32 kernel on the same values: identical statistics, y and dx its results rounded.
      BnRun f = bn_train(be, *k, cs.s, DType::F32, x, dy, gamma, beta, rm, rv);
      check_is_rounding_of("y", b.y, f.y);
      check_is_rounding_of("dx", b.dx, f.dx);
      for (auto [name, bt, ft] : {std::tuple{"save_mean", &b.mean, &f.mean}, {"save_invstd", &b.invstd, &f.invstd},
                                  {"running_mean", &b.rm, &f.rm}, {"running_var", &b.rv, &f.rv},
                                  {"dgamma", &b.dgamma, &f.dgamma}, {"dbeta", &b.dbeta, &f.dbeta}}) {
        INFO(name << " vs the f32 path");
        CHECK(same_bits(*bt, *ft));
      }
    }
  }
}

TEST_CASE("low-precision batchnorm inference and the sync pieces match float64 and the f32 path", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    const Backend& be = *lo.be;
    const DType L = lo.type;
    const double u = lo.u(), tol = be.tol;
    BatchNormParams p;
    auto k = make_kernel<BatchNormKernel>(lo.ctx(), p);
    std::mt19937_64 rng(102);
    for (Shape s : {Shape{2, 3, 4, 5}, Shape{7, 11}, Shape{64, 4, 4, 96}}) {
      INFO("x [" << s.str() << "]");
      int64_t C = s.back(), m = s.numel() / C;
      ref::Vec x = random_values(s, rng, L, -1.0, 3.0), dy = random_values(s, rng, L);
      Tensor hgamma = random_tensor({C}, rng, 0.5, 1.5), hbeta = random_tensor({C}, rng, -0.5, 0.5);
      Tensor hmean = random_tensor({C}, rng, 0.5, 1.5), hvar = random_tensor({C}, rng, 0.5, 1.5);
      Tensor hinvstd = random_tensor({C}, rng, 0.5, 2.0);
      Tensor gamma = be.upload(hgamma), beta = be.upload(hbeta), mean = be.upload(hmean), var = be.upload(hvar);
      Tensor invstd = be.upload(hinvstd);
      Tensor xb = be.upload(make(s, L, x)), dyb = be.upload(make(s, L, dy));
      Tensor xf = be.upload(make(s, DType::F32, x)), dyf = be.upload(make(s, DType::F32, dy));

      Tensor yb = be.upload(nan_of(s, L)), yf = be.upload(nan_of(s, DType::F32));
      k->forward_infer(xb, gamma, beta, mean, var, yb);
      k->forward_infer(xf, gamma, beta, mean, var, yf);
      ref::Vec want = ref::batchnorm_infer(x, m, C, to_vec(hgamma), to_vec(hbeta), to_vec(hmean), to_vec(hvar), p.epsilon);
      check_bound("forward_infer y", be.download(yb), want, u, (1 + u) * tol * max_abs_or_1(want));
      check_is_rounding_of("forward_infer y", be.download(yb), be.download(yf));

      // channel_sums and backward_sums: f32 [C] sums of low-precision rows, as the f32 path's.
      ref::Vec mu = to_vec(hmean), rs(C, 0.0), rq(C, 0.0), rdy(C, 0.0), rdyx(C, 0.0);
      for (size_t i = 0; i < x.size(); ++i) {
        size_t c = i % size_t(C);
        rs[c] += x[i] - mu[c], rq[c] += (x[i] - mu[c]) * (x[i] - mu[c]);
        rdy[c] += dy[i], rdyx[c] += dy[i] * (x[i] - mu[c]);
      }
      std::vector<Tensor> ob, of;
      for (int i = 0; i < 4; ++i) ob.push_back(be.upload(nan_of({C}, DType::F32))), of.push_back(be.upload(nan_of({C}, DType::F32)));
      k->channel_sums(xb, mean, ob[0], ob[1]);
      k->backward_sums(xb, dyb, mean, ob[2], ob[3]);
      k->channel_sums(xf, mean, of[0], of[1]);
      k->backward_sums(xf, dyf, mean, of[2], of[3]);
      const ref::Vec* wants[4] = {&rs, &rq, &rdy, &rdyx};
      for (int i = 0; i < 4; ++i) {
        INFO("sum " << i << " (sum, sumsq, sum_dy, sum_dy_xmu)");
        check_close("sum", be.download(ob[i]), *wants[i], tol);
        CHECK(same_bits(be.download(ob[i]), be.download(of[i])));
      }

      // backward_apply with global sums and count (several replicas' batches).
      double count = 3.0 * double(m) + 1.0;
      Tensor hsdy = random_tensor({C}, rng, -count / 4, count / 4), hsdyx = random_tensor({C}, rng, -count / 4, count / 4);
      Tensor sdy = be.upload(hsdy), sdyx = be.upload(hsdyx), count_d = be.upload(from_vec({1}, {count}));
      Tensor dxb = be.upload(nan_of(s, L)), dxf = be.upload(nan_of(s, DType::F32));
      k->backward_apply(xb, dyb, gamma, mean, invstd, sdy, sdyx, count_d, dxb);
      k->backward_apply(xf, dyf, gamma, mean, invstd, sdy, sdyx, count_d, dxf);
      ref::Vec g = to_vec(hgamma), is = to_vec(hinvstd), a = to_vec(hsdy), q = to_vec(hsdyx), rdx(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        size_t c = i % size_t(C);
        rdx[i] = g[c] * is[c] * (dy[i] - a[c] / count - (x[i] - mu[c]) * is[c] * is[c] * q[c] / count);
      }
      check_bound("backward_apply dx", be.download(dxb), rdx, u, (1 + u) * tol * max_abs_or_1(rdx));
      check_is_rounding_of("backward_apply dx", be.download(dxb), be.download(dxf));
    }
  }
}

TEST_CASE("bf16 batchnorm results are bit-identical with 1 and 2 threads") {
  // The chunked reductions do not depend on the thread count (as for f32); the OpenMP thread count
  // is the calling thread's, set by a context's bind_thread.
  static std::unique_ptr<OpContext> one = make_context(Device::cpu(), ContextOptions{1});
  auto k = make_kernel<BatchNormKernel>(cpu_ctx(), BatchNormParams{});
  std::mt19937_64 rng(103);
  Shape s{32, 9, 9, 40};  // 103680 elements: above the parallel grain
  ref::Vec x = random_values(s, rng, DType::BF16, 0.0, 2.0), dy = random_values(s, rng, DType::BF16);
  Tensor gamma = random_tensor({40}, rng, 0.5, 1.5), beta = random_tensor({40}, rng, -0.5, 0.5);
  Tensor rm = random_tensor({40}, rng, -0.2, 0.2), rv = random_tensor({40}, rng, 0.5, 1.5);
  std::vector<std::vector<Tensor>> runs;
  for (OpContext* c : {one.get(), &cpu_ctx()}) {
    c->bind_thread();
    BnRun r = bn_train(cpu_backend(), *k, s, DType::BF16, x, dy, gamma, beta, rm, rv);
    Tensor s1 = nan_of({40}, DType::F32), s2 = nan_of({40}, DType::F32);
    Tensor s3 = nan_of({40}, DType::F32), s4 = nan_of({40}, DType::F32);
    Tensor xb = make(s, DType::BF16, x), dyb = make(s, DType::BF16, dy);
    k->channel_sums(xb, r.mean, s1, s2);
    k->backward_sums(xb, dyb, r.mean, s3, s4);
    runs.push_back({r.y, r.mean, r.invstd, r.rm, r.rv, r.dx, r.dgamma, r.dbeta, s1, s2, s3, s4});
  }
  cpu_ctx().bind_thread();
  for (size_t i = 0; i < runs[0].size(); ++i) {
    INFO("output " << i << " (y, mean, invstd, rm, rv, dx, dgamma, dbeta, the four sums)");
    CHECK(same_bits(runs[0][i], runs[1][i]));
  }
}

TEST_CASE("low-precision batchnorm rejects mixed activation types and low-precision parameters", "[backends]") {
  for (const Low& lo : lows()) SECTION(lo.name()) {
    const Backend& be = *lo.be;
    const DType L = lo.type;
    auto k = make_kernel<BatchNormKernel>(lo.ctx(), BatchNormParams{});
    Shape s{3, 2, 2, 4};
    std::mt19937_64 rng(104);
    Tensor xb = be.upload(make(s, L, random_values(s, rng, L))), xf = be.upload(random_tensor(s, rng));
    Tensor yb = be.upload(nan_of(s, L)), yf = be.upload(nan_of(s, DType::F32)), xi = be.upload(Tensor::empty(s, DType::I32));
    Tensor v = be.upload(random_tensor({4}, rng, 0.5, 1.5)), vb = be.upload(make({4}, L, {1.0, 1.0, 1.0, 1.0}));
    Tensor mean = be.empty({4}), is = be.empty({4}), rm = be.empty({4}), rv = be.empty({4});
    CHECK_THROWS_AS(k->forward_train(xb, v, v, yf, mean, is, rm, rv), std::invalid_argument);
    CHECK_THROWS_AS(k->forward_train(xf, v, v, yb, mean, is, rm, rv), std::invalid_argument);
    CHECK_THROWS_AS(k->forward_train(xi, v, v, yb, mean, is, rm, rv), std::invalid_argument);
    CHECK_THROWS_AS(k->forward_train(xb, vb, v, yb, mean, is, rm, rv), std::invalid_argument);
    CHECK_THROWS_AS(k->forward_infer(xb, v, v, v, v, yf), std::invalid_argument);
    CHECK_THROWS_AS(k->backward(xb, Tensor(), v, xf, v, v, yb, mean, is), std::invalid_argument);  // dy f32
    CHECK_THROWS_AS(k->backward(xb, Tensor(), v, xb, v, v, yf, mean, is), std::invalid_argument);  // dx f32
    CHECK_THROWS_AS(k->backward_sums(xb, xf, v, mean, is), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(xb, xb, v, v, v, v, v, be.upload(from_vec({1}, {10.0})), yf), std::invalid_argument);
    CHECK_THROWS_AS(k->channel_sums(xb, vb, mean, is), std::invalid_argument);
  }
}
