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

// --- Synchronised batch norm pieces: channel_sums, backward_sums, backward_apply.

namespace {

// Per-channel float64 sums over the rows of [m, C]: sum of a(r, c), sum of b(r, c).
template <class F>
void ref_sums(int64_t m, int64_t C, const F& f, ref::Vec& s, ref::Vec& q) {
  s.assign(size_t(C), 0.0);
  q.assign(size_t(C), 0.0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < C; ++c) {
      auto [a, b] = f(size_t(r * C + c), size_t(c));
      s[size_t(c)] += a;
      q[size_t(c)] += b;
    }
}

ref::Vec ref_apply(const ref::Vec& x, const ref::Vec& dy, const ref::Vec* gamma, const ref::Vec& mean,
                   const ref::Vec& invstd, const ref::Vec& sdy, const ref::Vec& sdyx, double count, int64_t C) {
  ref::Vec dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    size_t c = i % size_t(C);
    double g = gamma ? (*gamma)[c] : 1.0, is = invstd[c];
    dx[i] = g * is * (dy[i] - sdy[c] / count - (x[i] - mean[c]) * is * is * sdyx[c] / count);
  }
  return dx;
}

// Items [i0, i1) of the first axis of a host tensor, as a host tensor (a replica's share of a batch).
Tensor host_rows(const Tensor& h, int64_t i0, int64_t i1) {
  Shape s = h.shape();
  int64_t per = s.numel() / s[0];  // floats per item of the first axis
  s[0] = i1 - i0;
  Tensor t = Tensor::empty(s);
  if (t.numel()) std::memcpy(t.f32(), h.f32() + i0 * per, size_t(t.numel()) * sizeof(float));
  return t;
}

}  // namespace

TEST_CASE("batchnorm channel_sums match float64 sums, with and without a shift", "[backends]") {
  BatchNormParams p;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(21);
    auto k = make_kernel<BatchNormKernel>(be.ctx(), p);
    struct Case {
      Shape s;
      double offset;
    };
    for (const Case& cs : {Case{{2, 5, 7, 3}, 0.0}, Case{{1, 3, 3, 1}, 0.5}, Case{{1, 5}, 0.0}, Case{{33, 37}, -1.0},
                           Case{{4, 9, 7, 13}, 0.0}, Case{{64, 8, 8, 33}, 1.0}, Case{{16, 15, 15, 70}, 0.0},
                           Case{{300, 5}, 2.0}, Case{{8, 6, 6, 5}, 100.0}, Case{{2000, 3}, 100.0}}) {
      INFO("x [" << cs.s.str() << "], values around " << cs.offset);
      int64_t C = cs.s.back(), m = cs.s.numel() / C;
      Tensor hx = random_tensor(cs.s, rng, cs.offset - 2.0, cs.offset + 2.0);
      // A shift near the mean, as the second pass of the layer uses (the first pass's mean).
      Tensor hshift = random_tensor({C}, rng, cs.offset - 0.1, cs.offset + 0.1);
      ref::Vec x = to_vec(hx), sh = to_vec(hshift);
      Tensor x_d = be.upload(hx);
      for (bool shifted : {false, true}) {
        INFO((shifted ? "with" : "without") << " shift");
        ref::Vec rs, rq;
        ref_sums(m, C, [&](size_t i, size_t c) {
          double d = x[i] - (shifted ? sh[c] : 0.0);
          return std::pair{d, d * d};
        }, rs, rq);
        Tensor s = be.nan({C}), q = be.nan({C});
        k->channel_sums(x_d, shifted ? be.upload(hshift) : be.undefined({C}), s, q);
        be.check("sum", s, rs);
        be.check("sumsq", q, rq);
        if (shifted) {
          // The variance from the shifted sums is accurate also when |mean| >> std.
          ref::Vec gs = be.vec(s), gq = be.vec(q), var(gs.size()), rvar(gs.size());
          for (size_t c = 0; c < size_t(C); ++c) {
            double dm = gs[c] / double(m), rdm = rs[c] / double(m);
            var[c] = gq[c] / double(m) - dm * dm;
            rvar[c] = rq[c] / double(m) - rdm * rdm;
          }
          check_close("variance from the shifted sums", var, rvar, be.tol);
        }
      }
    }
  }
}

TEST_CASE("batchnorm backward_sums match float64 sums", "[backends]") {
  BatchNormParams p;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(22);
    auto k = make_kernel<BatchNormKernel>(be.ctx(), p);
    for (Shape s : {Shape{2, 5, 7, 3}, Shape{1, 3, 3, 1}, Shape{1, 7}, Shape{33, 37}, Shape{64, 8, 8, 33},
                    Shape{16, 15, 15, 70}, Shape{8, 6, 6, 5}}) {
      INFO("x [" << s.str() << "]");
      int64_t C = s.back(), m = s.numel() / C;
      Tensor hx = random_tensor(s, rng, -1.0, 3.0), hdy = random_tensor(s, rng);
      Tensor hmean = random_tensor({C}, rng, 0.5, 1.5);
      ref::Vec x = to_vec(hx), dy = to_vec(hdy), mean = to_vec(hmean), rs, rq;
      ref_sums(m, C, [&](size_t i, size_t c) { return std::pair{dy[i], dy[i] * (x[i] - mean[c])}; }, rs, rq);
      Tensor sdy = be.nan({C}), sdyx = be.nan({C});
      k->backward_sums(be.upload(hx), be.upload(hdy), be.upload(hmean), sdy, sdyx);
      be.check("sum_dy", sdy, rs);
      be.check("sum_dy_xmu", sdyx, rq);
    }
  }
}

TEST_CASE("batchnorm backward_apply matches the float64 formula", "[backends]") {
  BatchNormParams p;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(23);
    auto k = make_kernel<BatchNormKernel>(be.ctx(), p);
    for (Shape s : {Shape{2, 5, 7, 3}, Shape{1, 3, 3, 1}, Shape{1, 7}, Shape{33, 37}, Shape{16, 15, 15, 70}}) {
      int64_t C = s.back(), m = s.numel() / C;
      Tensor hx = random_tensor(s, rng), hdy = random_tensor(s, rng), hg = random_tensor({C}, rng, 0.5, 1.5);
      Tensor hmean = random_tensor({C}, rng, -0.2, 0.2), his = random_tensor({C}, rng, 0.5, 2.0);
      // Global sums and count: this batch is one of several replicas' batches.
      double count = 3.0 * double(m) + 1.0;
      Tensor hsdy = random_tensor({C}, rng, -count / 4, count / 4);
      Tensor hsdyx = random_tensor({C}, rng, -count / 4, count / 4);
      ref::Vec g = to_vec(hg);
      Tensor x = be.upload(hx), dy = be.upload(hdy), mean = be.upload(hmean), is = be.upload(his);
      Tensor sdy = be.upload(hsdy), sdyx = be.upload(hsdyx);
      for (bool with_gamma : {true, false}) {
        INFO("x [" << s.str() << "], " << (with_gamma ? "with" : "without") << " gamma");
        Tensor dx = be.nan(s);
        k->backward_apply(x, dy, with_gamma ? be.upload(hg) : be.undefined({C}), mean, is, sdy, sdyx, count, dx);
        be.check("dx", dx,
                 ref_apply(to_vec(hx), to_vec(hdy), with_gamma ? &g : nullptr, to_vec(hmean), to_vec(his), to_vec(hsdy),
                           to_vec(hsdyx), count, C));
      }
      Tensor none;  // dx undefined: nothing to do
      REQUIRE_NOTHROW(k->backward_apply(x, dy, be.upload(hg), mean, is, sdy, sdyx, count, none));
    }
  }
}

TEST_CASE("batchnorm sync pieces over split batches reproduce forward_train and backward on the whole batch", "[backends]") {
  BatchNormParams p;
  p.momentum = 0.9f;
  p.epsilon = 1e-3f;
  struct Case {
    Shape s;
    std::vector<int64_t> split;  // items of the first axis per part
    double offset;
  };
  const std::vector<Case> cases = {
      {{7, 3, 3, 5}, {3, 4}, 0.0},       {{7, 3, 3, 5}, {2, 2, 3}, 0.5},  {{9, 13}, {4, 5}, 0.0},
      {{5, 7}, {1, 1, 3}, -1.0},         {{3, 2, 2, 3}, {1, 1, 1}, 0.0},  {{6, 4, 4, 33}, {0, 2, 4}, 1.0},
      {{40, 8, 8, 37}, {17, 23}, 0.0},   {{40, 8, 8, 37}, {10, 1, 29}, 3.0},
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(24);
    auto k = make_kernel<BatchNormKernel>(be.ctx(), p);
    for (const Case& cs : cases) {
      std::ostringstream parts;
      for (int64_t n : cs.split) parts << n << " ";
      INFO("x [" << cs.s.str() << "] split into " << parts.str() << "items, values around " << cs.offset);
      const Shape& s = cs.s;
      int64_t C = s.back(), m = s.numel() / C;
      BnTensors h = make_inputs(s, rng, cs.offset), t = upload(be, h);
      Tensor hdy = random_tensor(s, rng);

      // The whole batch on one replica.
      Tensor y = be.nan(s), mean = be.nan({C}), invstd = be.nan({C});
      k->forward_train(t.x, t.gamma, t.beta, y, mean, invstd, t.rm, t.rv);
      Tensor dx = be.nan(s), dgamma = be.nan({C}), dbeta = be.nan({C});
      k->backward(t.x, Tensor(), t.gamma, be.upload(hdy), mean, invstd, dx, dgamma, dbeta);

      // The parts, with their [C] results summed across parts as the layer sums them across replicas.
      std::vector<Tensor> xs, dys;
      int64_t i0 = 0;
      for (int64_t n : cs.split) {
        xs.push_back(be.upload(host_rows(h.x, i0, i0 + n)));
        dys.push_back(be.upload(host_rows(hdy, i0, i0 + n)));
        i0 += n;
      }
      REQUIRE(i0 == s[0]);
      auto all_reduce = [&](auto&& piece) {  // piece(i, a, b) fills part i's [C] pair; returns the sums
        std::pair<ref::Vec, ref::Vec> tot{ref::Vec(size_t(C), 0.0), ref::Vec(size_t(C), 0.0)};
        for (size_t i = 0; i < xs.size(); ++i) {
          Tensor a = be.nan({C}), b = be.nan({C});
          piece(i, a, b);
          ref::Vec va = be.vec(a), vb = be.vec(b);
          for (size_t c = 0; c < size_t(C); ++c) tot.first[c] += va[c], tot.second[c] += vb[c];
        }
        return tot;
      };
      const double count = double(m);
      // Pass 1: the mean; pass 2: the square sum centred on it.
      auto [s1, q1] = all_reduce([&](size_t i, Tensor& a, Tensor& b) { k->channel_sums(xs[i], Tensor(), a, b); });
      ref::Vec gmean(s1.size());
      for (size_t c = 0; c < size_t(C); ++c) gmean[c] = float(s1[c] / count);
      Tensor gmean_d = be.upload(from_vec({C}, gmean));
      auto [s2, q2] = all_reduce([&](size_t i, Tensor& a, Tensor& b) { k->channel_sums(xs[i], gmean_d, a, b); });
      ref::Vec gvar(s1.size()), ginvstd(s1.size());
      for (size_t c = 0; c < size_t(C); ++c) {
        double dm = s2[c] / count;
        gvar[c] = std::max(q2[c] / count - dm * dm, 0.0);
        ginvstd[c] = 1.0 / std::sqrt(gvar[c] + double(p.epsilon));
      }
      Tensor gvar_d = be.upload(from_vec({C}, gvar)), ginvstd_d = be.upload(from_vec({C}, ginvstd));
      be.check("global mean vs forward_train's", mean, gmean);
      be.check("global invstd vs forward_train's", invstd, ginvstd);

      ref::Vec ys, dxs;
      for (size_t i = 0; i < xs.size(); ++i) {
        Tensor yi = be.nan(xs[i].shape());
        k->forward_infer(xs[i], t.gamma, t.beta, gmean_d, gvar_d, yi);
        ref::Vec v = be.vec(yi);
        ys.insert(ys.end(), v.begin(), v.end());
      }
      be.check("y from the parts vs forward_train", y, ys);

      auto [sdy, sdyx] =
          all_reduce([&](size_t i, Tensor& a, Tensor& b) { k->backward_sums(xs[i], dys[i], gmean_d, a, b); });
      ref::Vec dg(sdy.size());
      for (size_t c = 0; c < size_t(C); ++c) dg[c] = sdyx[c] * ginvstd[c];
      be.check("dbeta from the parts vs backward", dbeta, sdy);
      be.check("dgamma from the parts vs backward", dgamma, dg);
      Tensor sdy_d = be.upload(from_vec({C}, sdy)), sdyx_d = be.upload(from_vec({C}, sdyx));
      for (size_t i = 0; i < xs.size(); ++i) {
        Tensor dxi = be.nan(xs[i].shape());
        k->backward_apply(xs[i], dys[i], t.gamma, gmean_d, ginvstd_d, sdy_d, sdyx_d, count, dxi);
        ref::Vec v = be.vec(dxi);
        dxs.insert(dxs.end(), v.begin(), v.end());
      }
      be.check("dx from the parts vs backward", dx, dxs);
    }
  }
}

TEST_CASE("batchnorm sync pieces handle an empty batch and reject bad arguments", "[backends]") {
  BatchNormParams p;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(25);
    auto k = make_kernel<BatchNormKernel>(be.ctx(), p);
    const int64_t C = 5;
    Tensor x0 = be.empty({0, 2, 2, C}), dy0 = be.empty({0, 2, 2, C});
    Tensor v = be.upload(random_tensor({C}, rng, 0.5, 1.5));
    Tensor a = be.nan({C}), b = be.nan({C});
    REQUIRE_NOTHROW(k->channel_sums(x0, v, a, b));
    be.check("sum of no rows", a, ref::Vec(C, 0.0), 0.0);
    be.check("sumsq of no rows", b, ref::Vec(C, 0.0), 0.0);
    a = be.nan({C}), b = be.nan({C});
    REQUIRE_NOTHROW(k->backward_sums(x0, dy0, v, a, b));
    be.check("sum_dy of no rows", a, ref::Vec(C, 0.0), 0.0);
    be.check("sum_dy_xmu of no rows", b, ref::Vec(C, 0.0), 0.0);
    Tensor dx0 = be.empty({0, 2, 2, C});
    REQUIRE_NOTHROW(k->backward_apply(x0, dy0, v, v, v, v, v, 10.0, dx0));

    Shape s{3, 2, 2, C};
    Tensor x = be.upload(random_tensor(s, rng)), dy = be.upload(random_tensor(s, rng)), dx = be.empty(s);
    Tensor bad_c = be.upload(random_tensor({C + 1}, rng)), bad_dy = be.empty({3, 2, 2, C + 1});
    CHECK_THROWS_AS(k->channel_sums(x, bad_c, a, b), std::invalid_argument);
    CHECK_THROWS_AS(k->channel_sums(x, Tensor(), bad_c, b), std::invalid_argument);
    CHECK_THROWS_AS(k->channel_sums(be.empty({C}), Tensor(), a, b), std::invalid_argument);  // rank 1
    CHECK_THROWS_AS(k->backward_sums(x, bad_dy, v, a, b), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_sums(x, dy, bad_c, a, b), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(x, dy, v, v, v, v, v, 0.0, dx), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(x, dy, v, v, v, v, v, -1.0, dx), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(x, bad_dy, v, v, v, v, v, 10.0, dx), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(x, dy, bad_c, v, v, v, v, 10.0, dx), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(x, dy, v, v, v, v, bad_c, 10.0, dx), std::invalid_argument);
    Tensor bad_dx = be.empty({3, 2, 2, C + 1});
    CHECK_THROWS_AS(k->backward_apply(x, dy, v, v, v, v, v, 10.0, bad_dx), std::invalid_argument);
  }
}

TEST_CASE("batchnorm sync sums are bit-identical from run to run") {
  // CPU: the chunked reduction does not depend on the thread count or scheduling.
  std::mt19937_64 rng(26);
  auto k = make_kernel<BatchNormKernel>(cpu_ctx(), BatchNormParams{});
  Shape s{32, 9, 9, 40};
  Tensor x = random_tensor(s, rng, 0.0, 2.0), dy = random_tensor(s, rng), mean = random_tensor({40}, rng, 0.9, 1.1);
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    std::vector<Tensor> out;
    for (int i = 0; i < 4; ++i) out.push_back(cpu_ctx().empty({40}));
    k->channel_sums(x, mean, out[0], out[1]);
    k->backward_sums(x, dy, mean, out[2], out[3]);
    std::vector<float> all;
    for (Tensor& v : out) all.insert(all.end(), v.f32(), v.f32() + v.numel());
    runs.push_back(std::move(all));
  }
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
}
