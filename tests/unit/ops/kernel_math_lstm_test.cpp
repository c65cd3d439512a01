// Kernel math: lstm_math.h (both backends' gate, cell and hidden-state arithmetic and its backward) driven through time on the host against the float64 LSTM reference.
#include "core/ops/math/lstm_math.h"

#include "kernel_math_util.h"
#include "reference_rnn.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;

namespace {

struct Dims {
  int64_t n, t, f, u;
  bool bias, seq;
};

struct Grads {
  ref::Vec y, dx, dw, dr, db;
};

// The kernels' algorithm (cpu_lstm.cpp, cuda_lstm.cu) with the GEMMs in double rounded to f32 (as
// a GEMM's f32 result) and the per-unit arithmetic lstm_math.h's, in f32. `wrong`: the backward
// forgets f in dL/dc_{t-1} (a deliberately wrong formula).
Grads run(const Dims& d, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& r,
          const std::vector<float>& b, const std::vector<float>& dy, bool wrong = false) {
  const int64_t N = d.n, T = d.t, F = d.f, U = d.u, G = 4 * U;
  std::vector<float> z(size_t(N * T * G)), cs(size_t(N * T * U)), hp(size_t(N * T * U), 0.0f);
  Grads o;
  o.y.assign(size_t(d.seq ? N * T * U : N * U), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = n * T + t;
      for (int64_t k = 0; k < G; ++k) {  // Z = x·W (+ h_{t-1}·R)
        double a = 0;
        for (int64_t q = 0; q < F; ++q) a += double(x[row * F + q]) * w[q * G + k];
        if (t > 0)
          for (int64_t q = 0; q < U; ++q) a += double(hp[row * U + q]) * r[q * G + k];
        z[row * G + k] = float(a);
      }
      float* zr = &z[row * G];
      for (int64_t j = 0; j < U; ++j) {
        const lstm_math::Cell s = lstm_math::cell_forward(zr[j], zr[U + j], zr[2 * U + j], zr[3 * U + j],
                                                          d.bias ? b.data() : nullptr, U, j,
                                                          t > 0 ? cs[(row - 1) * U + j] : 0.0f, t > 0);
        zr[j] = s.i, zr[U + j] = s.f, zr[2 * U + j] = s.g, zr[3 * U + j] = s.o;
        cs[row * U + j] = s.c;
        if (t + 1 < T) hp[(row + 1) * U + j] = s.h;
        if (d.seq) o.y[row * U + j] = s.h;
        else if (t + 1 == T) o.y[n * U + j] = s.h;
      }
    }
  std::vector<float> dz(size_t(N * T * G)), dh(size_t(N * U)), dc(size_t(N * U), 0.0f);
  for (int64_t t = T - 1; t >= 0; --t)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = n * T + t;
      const bool last = t + 1 == T;
      for (int64_t j = 0; j < U; ++j) {  // dh = dZ_{t+1}·Rᵀ
        double a = 0;
        if (!last)
          for (int64_t k = 0; k < G; ++k) a += double(dz[(row + 1) * G + k]) * r[j * G + k];
        dh[n * U + j] = float(a);
      }
      const float* zr = &z[row * G];
      for (int64_t j = 0; j < U; ++j) {
        const float g_out = d.seq ? dy[row * U + j] : (last ? dy[n * U + j] : 0.0f);
        const lstm_math::CellGrad g = lstm_math::cell_backward(
            zr[j], zr[U + j], zr[2 * U + j], zr[3 * U + j], cs[row * U + j], t > 0 ? cs[(row - 1) * U + j] : 0.0f,
            t > 0, last ? 0.0f : dh[n * U + j], g_out, last ? 0.0f : dc[n * U + j]);
        dz[row * G + j] = g.dzi, dz[row * G + U + j] = g.dzf, dz[row * G + 2 * U + j] = g.dzc;
        dz[row * G + 3 * U + j] = g.dzo;
        dc[n * U + j] = wrong ? g.dc_prev / zr[U + j] : g.dc_prev;
      }
    }
  o.dx.assign(size_t(N * T * F), 0.0), o.dw.assign(size_t(F * G), 0.0), o.dr.assign(size_t(U * G), 0.0);
  o.db.assign(size_t(G), 0.0);
  for (int64_t row = 0; row < N * T; ++row)
    for (int64_t k = 0; k < G; ++k) {
      const double g = dz[row * G + k];
      for (int64_t q = 0; q < F; ++q) {
        o.dx[row * F + q] += g * w[q * G + k];
        o.dw[q * G + k] += double(x[row * F + q]) * g;
      }
      for (int64_t q = 0; q < U; ++q) o.dr[q * G + k] += double(hp[row * U + q]) * g;
      o.db[k] += g;
    }
  for (auto* v : {&o.dx, &o.dw, &o.dr, &o.db})  // the GEMMs' f32 results
    for (double& e : *v) e = float(e);
  return o;
}

}  // namespace

// Each step rounds every gate, the cell and the hidden state once or twice in f32 (expf and tanhf
// within an ulp or two), and feeds them to the next: forward 16u·(t + 1) of the largest output;
// backward through t steps 32u·(t + 1) of the largest gradient. Forgetting the forget gate in the
// carried cell gradient is caught wherever there are two steps or more.
TEST_CASE("kernel math: lstm gates through time match the float64 LSTM forward and backward") {
  std::mt19937_64 rng(441);
  const Dims cases[] = {{1, 1, 1, 1, true, true}, {1, 1, 1, 1, false, false}, {2, 3, 4, 5, true, true},
                        {3, 7, 2, 4, true, false}, {1, 5, 3, 1, false, true},  {4, 2, 6, 3, true, true},
                        {2, 9, 1, 2, true, true}};
  for (const Dims& d : cases) {
    INFO("n " << d.n << ", t " << d.t << ", f " << d.f << ", u " << d.u << (d.bias ? ", bias" : "")
              << (d.seq ? ", every step" : ", last step"));
    const int64_t G = 4 * d.u;
    const std::vector<float> x = to_floats(random_floats(size_t(d.n * d.t * d.f), rng, -2, 2));
    const std::vector<float> w = to_floats(random_floats(size_t(d.f * G), rng, -0.8, 0.8));
    const std::vector<float> r = to_floats(random_floats(size_t(d.u * G), rng, -0.8, 0.8));
    const std::vector<float> b = to_floats(random_floats(size_t(G), rng, -0.5, 0.5));
    const std::vector<float> dy = to_floats(random_floats(size_t(d.seq ? d.n * d.t * d.u : d.n * d.u), rng));
    const Grads got = run(d, x, w, r, b, dy), bad = run(d, x, w, r, b, dy, true);
    const ref::Vec xv = to_doubles(x), wv = to_doubles(w), rv = to_doubles(r), bv = to_doubles(b);
    const ref::Vec* bp = d.bias ? &bv : nullptr;
    const ref::Vec h = ref::lstm_forward(xv, wv, rv, bp, d.n, d.t, d.f, d.u);
    ref::Vec want_y, dh(h.size(), 0.0);
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t t = 0; t < d.t; ++t)
        for (int64_t j = 0; j < d.u; ++j) {
          const size_t at = size_t((n * d.t + t) * d.u + j);
          if (d.seq) want_y.push_back(h[at]), dh[at] = dy[at];
          else if (t + 1 == d.t) want_y.push_back(h[at]), dh[at] = dy[size_t(n * d.u + j)];
        }
    const double steps = double(d.t + 1);
    check_within("y", got.y, want_y, 16 * kU * steps);
    ref::Vec dx, dw, dr, db;
    ref::lstm_backward(xv, wv, rv, bp, dh, d.n, d.t, d.f, d.u, dx, dw, dr, db);
    const double tol = 32 * kU * steps;
    if (d.t > 1) {  // the carried cell gradient reaches step t - 2's dz
      check_tight("dx", got.dx, dx, tol, bad.dx);
      check_tight("dw", got.dw, dw, tol, bad.dw);
    } else {
      check_within("dx", got.dx, dx, tol);
      check_within("dw", got.dw, dw, tol);
    }
    if (d.t > 2) check_tight("dr", got.dr, dr, tol, bad.dr);  // dr sees step 0's dz only through h_{-1} = 0
    else check_within("dr", got.dr, dr, tol);
    if (d.bias) check_within("db", got.db, db, tol);
  }
}

TEST_CASE("kernel math: lstm cell at the first step and with saturated gates") {
  // First step: c_{-1} = 0 is not read (a NaN there changes nothing) and the forget gate gets no
  // gradient.
  const lstm_math::Cell s = lstm_math::cell_forward(0.3f, -0.2f, 0.7f, 1.1f, nullptr, 1, 0, NAN, false);
  CHECK(s.c == s.i * s.g);
  CHECK(std::fabs(s.h - std::tanh(double(s.c)) * s.o) <= 4 * kU);
  const lstm_math::CellGrad g = lstm_math::cell_backward(s.i, s.f, s.g, s.o, s.c, NAN, false, 0.0f, 1.0f, 0.0f);
  CHECK(g.dzf == 0.0f);
  CHECK(std::isfinite(g.dzi));
  const double tc = std::tanh(double(s.c)), want_dc = double(s.o) * (1 - tc * tc) * s.f;
  CHECK(std::fabs(g.dc_prev - want_dc) <= 8 * kU * std::fabs(want_dc));
  // Saturated pre-activations: gates of exactly 0 and 1, finite states and gradients.
  const float bias[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const lstm_math::Cell t = lstm_math::cell_forward(1e4f, -1e4f, 1e4f, 1e4f, bias, 1, 0, 5.0f, true);
  CHECK(t.i == 1.0f);
  CHECK(t.f == 0.0f);
  CHECK(t.c == 1.0f);
  const lstm_math::CellGrad u = lstm_math::cell_backward(t.i, t.f, t.g, t.o, t.c, 5.0f, true, 1.0f, 1.0f, 1.0f);
  CHECK((std::isfinite(u.dzi) && std::isfinite(u.dzf) && std::isfinite(u.dzc) && std::isfinite(u.dzo)));
  CHECK(u.dzf == 0.0f);
}
