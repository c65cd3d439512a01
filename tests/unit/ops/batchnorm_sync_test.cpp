// Synchronised batch norm's pieces (sync_bn: statistics over several replicas' batches) against float64: the sums, the finishes on the device, dx from the global sums.
#include <sstream>

#include "core/ops/batchnorm.h"

#include "backends.h"

using namespace trainer;
using namespace trainer::test;

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
      Tensor count_d = be.upload(from_vec({1}, {count}));
      Tensor hsdy = random_tensor({C}, rng, -count / 4, count / 4);
      Tensor hsdyx = random_tensor({C}, rng, -count / 4, count / 4);
      ref::Vec g = to_vec(hg);
      Tensor x = be.upload(hx), dy = be.upload(hdy), mean = be.upload(hmean), is = be.upload(his);
      Tensor sdy = be.upload(hsdy), sdyx = be.upload(hsdyx);
      for (bool with_gamma : {true, false}) {
        INFO("x [" << s.str() << "], " << (with_gamma ? "with" : "without") << " gamma");
        Tensor dx = be.nan(s);
        k->backward_apply(x, dy, with_gamma ? be.upload(hg) : be.undefined({C}), mean, is, sdy, sdyx, count_d, dx);
        be.check("dx", dx,
                 ref_apply(to_vec(hx), to_vec(hdy), with_gamma ? &g : nullptr, to_vec(hmean), to_vec(his), to_vec(hsdy),
                           to_vec(hsdyx), count, C));
      }
      Tensor none;  // dx undefined: nothing to do
      REQUIRE_NOTHROW(k->backward_apply(x, dy, be.upload(hg), mean, is, sdy, sdyx, count_d, none));
    }
  }
}

namespace {

// Sums the f32 tensors in place over the parts, in part order (as the in-process communicator
// adds the replicas'), every part left with the sum.
void all_reduce(const Backend& be, const std::vector<Tensor>& parts) {
  std::vector<float> sum;
  for (const Tensor& t : parts) {
    ref::Vec v = be.vec(t);
    if (sum.empty()) sum.assign(v.size(), 0.0f);
    for (size_t i = 0; i < v.size(); ++i) sum[i] += float(v[i]);
  }
  for (const Tensor& t : parts) be.ctx().copy_from_host(t.data(), sum.data(), sum.size() * sizeof(float));
}

ref::Vec joined(const Backend& be, const std::vector<Tensor>& parts) {
  ref::Vec all;
  for (const Tensor& t : parts) {
    ref::Vec v = be.vec(t);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace

TEST_CASE("batchnorm sync pieces over split batches give the whole batch's float64 statistics, running statistics and gradients",
          "[backends]") {
  // What the layer does on each replica with sync_bn: the sums and count of pass 1, the mean, the
  // sums centred on it, the statistics, normalisation; backward's sums, its own dgamma and dbeta,
  // the global sums, dx — each [C] sum added over the parts between the calls.
  struct Case {
    Shape s;
    std::vector<int64_t> split;  // items of the first axis per part
    double offset;
    bool unbiased;
  };
  const std::vector<Case> cases = {
      {{7, 3, 3, 5}, {3, 4}, 0.0, false},     {{7, 3, 3, 5}, {2, 2, 3}, 0.5, true}, {{9, 13}, {4, 5}, 0.0, false},
      {{5, 7}, {1, 1, 3}, -1.0, true},        {{3, 2, 2, 3}, {1, 1, 1}, 0.0, false}, {{6, 4, 4, 33}, {0, 2, 4}, 1.0, true},
      {{40, 8, 8, 37}, {17, 23}, 0.0, false}, {{40, 8, 8, 37}, {10, 1, 29}, 3.0, true},
      {{1, 1, 1, 3}, {1}, 0.0, true},         {{2, 1}, {1, 1}, 100.0, false},
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(24);
    for (const Case& cs : cases) {
      std::ostringstream parts;
      for (int64_t n : cs.split) parts << n << " ";
      INFO("x [" << cs.s.str() << "] split into " << parts.str() << "items, values around " << cs.offset << ", "
                 << (cs.unbiased ? "unbiased" : "biased") << " moving variance");
      BatchNormParams p;
      p.momentum = 0.9f;
      p.epsilon = 1e-3f;
      p.unbiased_moving_variance = cs.unbiased;
      auto k = make_kernel<BatchNormKernel>(be.ctx(), p);
      const Shape& s = cs.s;
      const int64_t C = s.back(), m = s.numel() / C;
      Tensor hx = random_tensor(s, rng, cs.offset - 2.0, cs.offset + 2.0), hdy = random_tensor(s, rng);
      Tensor hg = random_tensor({C}, rng, 0.5, 1.5), hb = random_tensor({C}, rng, -0.5, 0.5);
      Tensor hrm = random_tensor({C}, rng, -0.2, 0.2), hrv = random_tensor({C}, rng, 0.5, 1.5);
      const ref::Vec g = to_vec(hg);
      const ref::BnTrain want = ref::batchnorm_train(to_vec(hx), m, C, g, to_vec(hb), to_vec(hrm), to_vec(hrv),
                                                     p.momentum, p.epsilon, cs.unbiased);
      ref::Vec wdx, wdg, wdb;
      ref::batchnorm_backward(to_vec(hx), m, C, g, to_vec(hdy), p.epsilon, wdx, wdg, wdb);
      Tensor gamma = be.upload(hg), beta = be.upload(hb);

      const size_t P = cs.split.size();
      std::vector<Tensor> xs, dys, stats, first, second, mean, invstd, var, rm, rv, ys, grads, dg, db, dxs;
      int64_t i0 = 0;
      for (int64_t n : cs.split) {
        xs.push_back(be.upload(host_rows(hx, i0, i0 + n)));
        dys.push_back(be.upload(host_rows(hdy, i0, i0 + n)));
        stats.push_back(be.nan({2 * C + 1}));  // [count | sum | sumsq], as the layer keeps them
        first.push_back(stats.back().slice(0, 1 + C));
        second.push_back(stats.back().slice(1, 1 + 2 * C));
        i0 += n;
      }
      REQUIRE(i0 == s[0]);
      auto count = [&](size_t i) { return stats[i].slice(0, 1); };
      auto sum = [&](size_t i) { return stats[i].slice(1, 1 + C); };
      auto sumsq = [&](size_t i) { return stats[i].slice(1 + C, 1 + 2 * C); };
      for (size_t i = 0; i < P; ++i) {
        Tensor a = sum(i), b = sumsq(i), n = count(i);
        k->channel_sums(xs[i], Tensor(), a, b);
        k->sync_count(xs[i], n);
        be.check("part's count", n, ref::Vec{double(cs.split[i] * (m / s[0]))}, 0.0);
      }
      all_reduce(be, first);
      for (size_t i = 0; i < P; ++i) {
        Tensor a = sum(i), b = sumsq(i), n = count(i);
        mean.push_back(be.nan({C}));
        k->sync_mean(a, n, mean[i]);
        k->channel_sums(xs[i], mean[i], a, b);
      }
      all_reduce(be, second);
      for (size_t i = 0; i < P; ++i) {
        invstd.push_back(be.nan({C}));
        var.push_back(be.nan({C}));
        rm.push_back(be.upload(hrm));
        rv.push_back(be.upload(hrv));
        k->sync_stats(sum(i), sumsq(i), count(i), mean[i], invstd[i], var[i], rm[i], rv[i]);
        ys.push_back(be.nan(xs[i].shape()));
        k->forward_infer(xs[i], gamma, beta, mean[i], var[i], ys[i]);
      }
      be.check("global count", count(0), ref::Vec{double(m)}, 0.0);
      be.check("mean", mean[0], want.mean);
      be.check("invstd", invstd[0], want.invstd);
      be.check("running mean", rm[0], want.running_mean);
      be.check("running variance", rv[0], want.running_var);
      check_close("y", joined(be, ys), want.y, be.tol);
      // Every part holds the same statistics, bit for bit (what keeps replicas identical).
      for (size_t i = 1; i < P; ++i)
        for (const auto* t : {&mean, &invstd, &var, &rm, &rv}) CHECK(be.vec((*t)[i]) == be.vec((*t)[0]));

      ref::Vec dg_sum(size_t(C), 0.0), db_sum(size_t(C), 0.0);
      for (size_t i = 0; i < P; ++i) {
        grads.push_back(be.nan({2 * C}));
        Tensor sdy = grads[i].slice(0, C), sdx = grads[i].slice(C, 2 * C);
        k->backward_sums(xs[i], dys[i], mean[i], sdy, sdx);
        dg.push_back(be.nan({C}));
        db.push_back(be.nan({C}));
        k->sync_param_grads(sdy, sdx, invstd[i], dg[i], db[i]);
        ref::Vec a = be.vec(dg[i]), b = be.vec(db[i]);
        for (size_t c = 0; c < size_t(C); ++c) dg_sum[c] += a[c], db_sum[c] += b[c];
      }
      check_close("dgamma summed over the parts", dg_sum, wdg, be.tol);
      check_close("dbeta summed over the parts", db_sum, wdb, be.tol);
      all_reduce(be, grads);
      for (size_t i = 0; i < P; ++i) {
        dxs.push_back(be.nan(xs[i].shape()));
        k->backward_apply(xs[i], dys[i], gamma, mean[i], invstd[i], grads[i].slice(0, C), grads[i].slice(C, 2 * C),
                          count(i), dxs[i]);
      }
      check_close("dx", joined(be, dxs), wdx, be.tol);
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
    Tensor a = be.nan({C}), b = be.nan({C}), n = be.nan({1});
    REQUIRE_NOTHROW(k->channel_sums(x0, v, a, b));
    be.check("sum of no rows", a, ref::Vec(C, 0.0), 0.0);
    be.check("sumsq of no rows", b, ref::Vec(C, 0.0), 0.0);
    REQUIRE_NOTHROW(k->sync_count(x0, n));
    be.check("count of no rows", n, ref::Vec{0.0}, 0.0);
    // No rows on any replica: a mean of 0, forward_train's empty statistics, the running ones kept.
    Tensor mean = be.nan({C}), is = be.nan({C}), var = be.nan({C});
    Tensor hrm = random_tensor({C}, rng), hrv = random_tensor({C}, rng, 0.5, 1.5);
    Tensor rm = be.upload(hrm), rv = be.upload(hrv);
    REQUIRE_NOTHROW(k->sync_mean(a, n, mean));
    be.check("mean of no rows", mean, ref::Vec(C, 0.0), 0.0);
    REQUIRE_NOTHROW(k->sync_stats(a, b, n, mean, is, var, rm, rv));
    be.check("invstd of no rows", is, ref::Vec(C, double(1.0f / std::sqrt(p.epsilon))), 0.0);
    be.check("variance of no rows", var, ref::Vec(C, 0.0), 0.0);
    be.check("running mean kept", rm, to_vec(hrm), 0.0);
    be.check("running variance kept", rv, to_vec(hrv), 0.0);
    a = be.nan({C}), b = be.nan({C});
    REQUIRE_NOTHROW(k->backward_sums(x0, dy0, v, a, b));
    be.check("sum_dy of no rows", a, ref::Vec(C, 0.0), 0.0);
    be.check("sum_dy_xmu of no rows", b, ref::Vec(C, 0.0), 0.0);
    Tensor dx0 = be.empty({0, 2, 2, C});
    REQUIRE_NOTHROW(k->backward_apply(x0, dy0, v, v, v, v, v, n, dx0));
    // Parameters that do not train: their gradients undefined, the other written.
    Tensor dbeta = be.nan({C}), none;
    REQUIRE_NOTHROW(k->sync_param_grads(a, b, v, none, dbeta));
    be.check("dbeta without dgamma", dbeta, ref::Vec(C, 0.0), 0.0);

    Shape s{3, 2, 2, C};
    Tensor x = be.upload(random_tensor(s, rng)), dy = be.upload(random_tensor(s, rng)), dx = be.empty(s);
    Tensor bad_c = be.upload(random_tensor({C + 1}, rng)), bad_dy = be.empty({3, 2, 2, C + 1});
    Tensor count = be.upload(from_vec({1}, {10.0})), bad_count = be.upload(from_vec({2}, {10.0, 10.0}));
    CHECK_THROWS_AS(k->channel_sums(x, bad_c, a, b), std::invalid_argument);
    CHECK_THROWS_AS(k->channel_sums(x, Tensor(), bad_c, b), std::invalid_argument);
    CHECK_THROWS_AS(k->channel_sums(be.empty({C}), Tensor(), a, b), std::invalid_argument);  // rank 1
    CHECK_THROWS_AS(k->sync_count(x, bad_count), std::invalid_argument);
    CHECK_THROWS_AS(k->sync_count(x, none), std::invalid_argument);
    CHECK_THROWS_AS(k->sync_mean(a, bad_count, mean), std::invalid_argument);
    CHECK_THROWS_AS(k->sync_mean(a, count, bad_c), std::invalid_argument);
    CHECK_THROWS_AS(k->sync_stats(a, bad_c, count, mean, is, var, rm, rv), std::invalid_argument);
    CHECK_THROWS_AS(k->sync_stats(a, b, count, mean, is, var, rm, none), std::invalid_argument);
    CHECK_THROWS_AS(k->sync_param_grads(a, b, bad_c, dbeta, dbeta), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_sums(x, bad_dy, v, a, b), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_sums(x, dy, bad_c, a, b), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(x, dy, v, v, v, v, v, bad_count, dx), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(x, bad_dy, v, v, v, v, v, count, dx), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(x, dy, bad_c, v, v, v, v, count, dx), std::invalid_argument);
    CHECK_THROWS_AS(k->backward_apply(x, dy, v, v, v, v, bad_c, count, dx), std::invalid_argument);
    Tensor bad_dx = be.empty({3, 2, 2, C + 1});
    CHECK_THROWS_AS(k->backward_apply(x, dy, v, v, v, v, v, count, bad_dx), std::invalid_argument);
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
