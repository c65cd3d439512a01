// Kernel math: batchnorm_math.h with column_reduce.h run on the host as the CUDA kernels run it (terms, reduction order, finishes, element formulas) against the float64 reference.
#include "core/ops/math/batchnorm_math.h"

#include "core/ops/math/column_reduce.h"
#include "kernel_math_util.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;

namespace {

struct Inputs {
  int64_t m, C;
  std::vector<float> x, dy, gamma, beta, rm, rv;
};

Inputs make(int64_t m, int64_t C, double offset, std::mt19937_64& rng) {
  Inputs in{m, C, to_floats(random_floats(size_t(m * C), rng, offset - 2, offset + 2)),
            to_floats(random_floats(size_t(m * C), rng)),
            to_floats(random_floats(size_t(C), rng, 0.5, 1.5)),
            to_floats(random_floats(size_t(C), rng, -0.5, 0.5)),
            to_floats(random_floats(size_t(C), rng, -0.2, 0.2)),
            to_floats(random_floats(size_t(C), rng, 0.5, 1.5))};
  return in;
}

struct Out {
  ref::Vec y, mean, invstd, rm, rv, dx, dgamma, dbeta;
};

// cuda_batchnorm.cu's forward_train then backward with fused activation A, step by step on the
// host. `no_eps` is a deliberately wrong variant (eps left out of the variance); `unbiased` is
// BatchNormParams::unbiased_moving_variance.
template <int A>
Out gpu_path(const Inputs& in, float momentum, float eps, bool no_eps = false, bool unbiased = false) {
  const int64_t m = in.m, C = in.C;
  Out o;
  std::vector<double> s(size_t(2 * C));
  colred::column_reduce_reference<2>(
      m, C, [&](int64_t r, int64_t c, double(&a)[2]) { bn::centred_terms(in.x[r * C + c], in.x[c], a); }, s.data());
  std::vector<float> a(C), b(C), mean(C), invstd(C);
  for (int64_t c = 0; c < C; ++c) {
    const bn::TrainStats st = bn::train_stats(s[2 * c], s[2 * c + 1], double(m), in.x[c], in.gamma[c], in.beta[c],
                                              no_eps ? 0.0 : double(eps), momentum, in.rm[c], in.rv[c], unbiased);
    mean[c] = st.mean, invstd[c] = st.invstd, a[c] = st.a, b[c] = st.b;
    o.mean.push_back(st.mean), o.invstd.push_back(st.invstd);
    o.rm.push_back(st.running_mean), o.rv.push_back(st.running_var);
  }
  std::vector<float> y(size_t(m * C));
  for (int64_t i = 0; i < m * C; ++i) y[i] = bn::act_clamp<A>(bn::normalise(in.x[i], a[i % C], b[i % C]));
  o.y = to_doubles(y);
  std::vector<double> g(size_t(2 * C));
  colred::column_reduce_reference<2>(
      m, C,
      [&](int64_t r, int64_t c, double(&acc)[2]) {
        const int64_t i = r * C + c;
        bn::grad_terms(bn::act_through<A>(in.dy[i], y[i]), in.x[i], mean[c], acc);
      },
      g.data());
  std::vector<bn::InputGrad> k(C);
  for (int64_t c = 0; c < C; ++c) {
    const bn::GradCoef gc = bn::grad_coef(g[2 * c], g[2 * c + 1], invstd[c], in.gamma[c], double(m));
    o.dgamma.push_back(gc.dgamma), o.dbeta.push_back(gc.dbeta);
    k[c] = gc.dx;
  }
  for (int64_t i = 0; i < m * C; ++i) {
    const int64_t c = i % C;
    const float gi = bn::act_through<A>(in.dy[i], y[i]);
    o.dx.push_back(bn::input_grad(gi, in.x[i], mean[c], k[c].p, k[c].q, k[c].r));
  }
  return o;
}

// y's error bound per element: a and b are rounded from double, then x·a + b is rounded twice
// (or fused): |err| <= 3u·(|x·a| + |b| + |y|). Returns max |err| / (|x·a| + |b| + 1) in units of u.
double y_error(const Inputs& in, const Out& o, const ref::Vec& want) {
  double worst = 0;
  for (int64_t i = 0; i < in.m * in.C; ++i) {
    const int64_t c = i % in.C;
    const double a = double(in.gamma[c]) * o.invstd[c], b = double(in.beta[c]) - o.mean[c] * a;
    const double scale = std::fabs(double(in.x[i]) * a) + std::fabs(b) + 1.0;
    worst = std::max(worst, std::fabs(o.y[i] - want[i]) / scale);
  }
  return worst / kU;
}

// The natural scale of dx and dγ's rounding errors: dx = γ·is·(dy - ...) is made of terms of size
// γ·is·|dy| that cancel (completely for one row), so its errors are relative to the largest of them.
double grad_scale(const Inputs& in, const Out& o) {
  double s = 1;
  for (int64_t c = 0; c < in.C; ++c) s = std::max(s, std::fabs(double(in.gamma[c]) * o.invstd[c]));
  return s;
}

void check_case(int64_t m, int64_t C, double offset, std::mt19937_64& rng) {
  INFO("[" << m << ", " << C << "], values around " << offset);
  const float mom = 0.9f, eps = 1e-3f;
  const Inputs in = make(m, C, offset, rng);
  const Out o = gpu_path<0>(in, mom, eps), bad = gpu_path<0>(in, mom, eps, true);
  const ref::Vec x = to_doubles(in.x);
  const ref::BnTrain want = ref::batchnorm_train(x, m, C, to_doubles(in.gamma), to_doubles(in.beta),
                                                 to_doubles(in.rm), to_doubles(in.rv), mom, eps);
  // y: 4u of (|x·a| + |b| + 1); leaving eps out is caught (with more than one row: one row has
  // variance 0, and without eps no finite y at all).
  const double ey = y_error(in, o, want.y), ebad = y_error(in, bad, want.y);
  INFO("y: error " << ey << "u of |x·a| + |b| + 1 (bound 4u), without eps " << ebad << "u");
  CHECK(ey <= 4);
  if (m > 1) CHECK(ebad > 4);
  // [C] statistics: double arithmetic rounded once to f32. The running variance averages the
  // biased batch variance (Keras 3), or with `unbiased` the unbiased one (PyTorch): with more than
  // one row each is within 2u of its reference and the other form is caught; with one row both
  // batch variances are 0.
  check_within("mean", o.mean, want.mean, 2 * kU);
  check_within("invstd", o.invstd, want.invstd, 2 * kU);
  check_within("running_mean", o.rm, want.running_mean, 2 * kU);
  for (bool unbiased : {false, true}) {
    INFO((unbiased ? "unbiased" : "biased") << " moving variance");
    const Out ou = gpu_path<0>(in, mom, eps, false, unbiased);
    const ref::Vec rv = ref::batchnorm_train(x, m, C, to_doubles(in.gamma), to_doubles(in.beta), to_doubles(in.rm),
                                             to_doubles(in.rv), mom, eps, unbiased).running_var;
    const ref::Vec other = ref::batchnorm_train(x, m, C, to_doubles(in.gamma), to_doubles(in.beta), to_doubles(in.rm),
                                                to_doubles(in.rv), mom, eps, !unbiased).running_var;
    if (m > 1) {
      check_tight("running_var", ou.rv, rv, 2 * kU, other);
    } else {
      for (int64_t c = 0; c < C; ++c) CHECK(ou.rv[c] == float(double(mom) * in.rv[c]));  // one row: variance 0
    }
  }

  ref::Vec dx, dgamma, dbeta;
  ref::batchnorm_backward(x, m, C, to_doubles(in.gamma), to_doubles(in.dy), eps, dx, dgamma, dbeta);
  // Σdy of f32 values in double: one rounding. dγ and dx use the saved f32 invstd and mean, whose
  // rounding (u/2·|mean|) shifts every x - mean alike, and x - mean in f32; dx's terms cancel:
  // (8 + |offset|)·u of γ·is.
  const double tol = (8 + std::fabs(offset)) * kU * grad_scale(in, o);
  check_within("dbeta", o.dbeta, dbeta, 2 * kU);
  if (m > 1) {
    check_tight("dgamma", o.dgamma, dgamma, tol, bad.dgamma);
    check_tight("dx", o.dx, dx, tol, bad.dx);
  } else {
    check_within("dgamma", o.dgamma, dgamma, tol);  // one row: x̂ = 0, dx = 0 whatever eps is
    check_within("dx", o.dx, dx, tol);
  }
}

}  // namespace

TEST_CASE("kernel math: batchnorm forward_train and backward (GPU order) match float64") {
  std::mt19937_64 rng(411);
  const int64_t shapes[][2] = {{1, 1}, {1, 7}, {2, 1}, {7, 3}, {33, 17}, {1000, 5}, {4099, 33}, {300, 96}};
  for (const auto& s : shapes)
    for (double offset : {0.0, 100.0}) check_case(s[0], s[1], offset, rng);
}

// The fused ReLU/ReLU6: y = clamp(bn(x)); the gradient passes where the output is strictly inside
// the bounds, so the reference is batch norm's backward of dy masked by our y.
TEST_CASE("kernel math: batchnorm with a fused relu/relu6 matches float64 through the clamp") {
  std::mt19937_64 rng(412);
  for (int A : {1, 2})
    for (const auto& s : {std::pair<int64_t, int64_t>{1, 1}, {33, 17}, {2048, 9}}) {
      INFO((A == 1 ? "relu" : "relu6") << " on [" << s.first << ", " << s.second << "]");
      const int64_t m = s.first, C = s.second;
      Inputs in = make(m, C, 0.0, rng);
      for (auto& g : in.gamma) g *= 4;  // outputs reach past 6
      const Out o = A == 1 ? gpu_path<1>(in, 0.9f, 1e-3f) : gpu_path<2>(in, 0.9f, 1e-3f);
      const ref::Vec x = to_doubles(in.x);
      const ref::BnTrain want = ref::batchnorm_train(x, m, C, to_doubles(in.gamma), to_doubles(in.beta),
                                                     to_doubles(in.rm), to_doubles(in.rv), 0.9, 1e-3);
      ref::Vec wy = want.y, dyz = to_doubles(in.dy), wrong(o.y.size());
      const double hi = A == 2 ? 6.0 : INFINITY;
      for (size_t i = 0; i < wy.size(); ++i) {
        wrong[i] = o.y[i] == 0.0 ? want.y[i] : o.y[i];  // the clamp forgotten below 0
        wy[i] = std::min(std::max(wy[i], 0.0), hi);
        if (!(o.y[i] > 0.0 && o.y[i] < hi)) dyz[i] = 0.0;
      }
      // The clamp moves no value further from the reference: y's bound as without it.
      Out w = o;
      w.y = wrong;
      const double ey = y_error(in, o, wy), ewrong = y_error(in, w, wy);
      INFO("y: error " << ey << "u of |x·a| + |b| + 1 (bound 4u), unclamped below 0 " << ewrong << "u");
      CHECK(ey <= 4);
      if (std::count(o.y.begin(), o.y.end(), 0.0) > 0) CHECK(ewrong > 4);  // when something was clamped
      ref::Vec dx, dgamma, dbeta;
      ref::batchnorm_backward(x, m, C, to_doubles(in.gamma), dyz, 1e-3, dx, dgamma, dbeta);
      check_within("dbeta", o.dbeta, dbeta, 2 * kU);
      check_within("dgamma", o.dgamma, dgamma, 8 * kU * grad_scale(in, o));
      check_within("dx", o.dx, dx, 8 * kU * grad_scale(in, o));
    }
}

TEST_CASE("kernel math: batchnorm inference and synchronised coefficients match float64") {
  std::mt19937_64 rng(413);
  for (int64_t C : {1, 5, 64}) {
    const Inputs in = make(3, C, 0.0, rng);
    ref::Vec y, wrong;
    const ref::Vec want = ref::batchnorm_infer(to_doubles(in.x), 3, C, to_doubles(in.gamma), to_doubles(in.beta),
                                               to_doubles(in.rm), to_doubles(in.rv), 1e-3);
    for (int64_t i = 0; i < 3 * C; ++i) {
      const int64_t c = i % C;
      const bn::Affine af = bn::infer_affine(in.gamma[c], in.beta[c], in.rm[c], in.rv[c], 1e-3);
      y.push_back(bn::normalise(in.x[i], af.a, af.b));
      const bn::Affine no_eps = bn::infer_affine(in.gamma[c], in.beta[c], in.rm[c], in.rv[c], 0.0);
      wrong.push_back(bn::normalise(in.x[i], no_eps.a, no_eps.b));
    }
    check_tight("inference y", y, want, 8 * kU, wrong);
  }
  // backward_apply's coefficients with one replica's sums equal backward's (the same dx formula
  // written from Σdy(x - mean) instead of dγ).
  for (int i = 0; i < 200; ++i) {
    const double sg = random_floats(1, rng, -50, 50)[0], sgx = random_floats(1, rng, -50, 50)[0];
    const float is = float(random_floats(1, rng, 0.2, 5)[0]), gamma = float(random_floats(1, rng, 0.5, 1.5)[0]);
    const double m = double(uniform_int(rng, 1, 5000));
    const bn::GradCoef a = bn::grad_coef(sg, sgx, is, gamma, m);
    const bn::InputGrad b = bn::apply_coef(gamma, is, float(sg), float(sgx), m);
    const double ref_q = -double(gamma) * is * is * is * sgx / m, ref_r = -double(gamma) * is * sg / m;
    CHECK(a.dx.p == b.p);
    CHECK(std::fabs(a.dx.q - ref_q) <= 4 * kU * std::fabs(ref_q));
    CHECK(std::fabs(b.q - ref_q) <= 4 * kU * std::fabs(ref_q));
    CHECK(std::fabs(a.dx.r - ref_r) <= 2 * kU * std::fabs(ref_r));
    CHECK(std::fabs(b.r - ref_r) <= 4 * kU * std::fabs(ref_r));
  }
  CHECK(bn::empty_invstd(1e-3f) == 1.0f / std::sqrt(1e-3f));
  double z[3][2] = {};  // an empty batch reduces to zeros (the kernel writes mean 0 and empty_invstd)
  colred::column_reduce_reference<2>(0, 3, [](int64_t, int64_t, double(&)[2]) {}, &z[0][0]);
  CHECK((z[0][0] == 0 && z[2][1] == 0));
}
