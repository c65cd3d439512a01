// simple_rnn tests: forward and backward (both output modes, every activation) against a float64 reference on every backend, with threads splitting the batch; misuse errors and an empty batch.
#include <cmath>

#include "backends.h"
#include "core/ops/simple_rnn.h"
#include "reference_rnn.h"

using namespace trainer;
using namespace trainer::test;
using simple_rnn_math::Act;

namespace {

struct Case {
  int64_t n, t, f, u;
  bool bias = true, dx = true;
  Act act = Act::Tanh;
};

double act_of(Act a, double v) {
  return a == Act::Tanh ? std::tanh(v) : a == Act::Relu ? std::max(v, 0.0) : a == Act::Sigmoid ? 1.0 / (1.0 + std::exp(-v)) : v;
}
double act_grad(Act a, double h) {  // from the output
  return a == Act::Tanh ? 1.0 - h * h : a == Act::Relu ? (h > 0.0 ? 1.0 : 0.0) : a == Act::Sigmoid ? h * (1.0 - h) : 1.0;
}

// h_t = act(x_t·W + b + h_{t-1}·R) in float64, every step's h [n, t, u]; and its backward from
// dh (every step's dL/dh_t from the output).
ref::Vec forward_ref(const Case& c, const ref::Vec& x, const ref::Vec& w, const ref::Vec& r, const ref::Vec* b) {
  ref::Vec h(size_t(c.n * c.t * c.u));
  for (int64_t s = 0; s < c.n; ++s)
    for (int64_t t = 0; t < c.t; ++t)
      for (int64_t j = 0; j < c.u; ++j) {
        double v = b ? (*b)[size_t(j)] : 0.0;
        for (int64_t k = 0; k < c.f; ++k) v += x[size_t((s * c.t + t) * c.f + k)] * w[size_t(k * c.u + j)];
        if (t > 0)
          for (int64_t k = 0; k < c.u; ++k) v += h[size_t((s * c.t + t - 1) * c.u + k)] * r[size_t(k * c.u + j)];
        h[size_t((s * c.t + t) * c.u + j)] = act_of(c.act, v);
      }
  return h;
}
void backward_ref(const Case& c, const ref::Vec& x, const ref::Vec& w, const ref::Vec& r, const ref::Vec& h,
                  const ref::Vec& dh_out, ref::Vec& dx, ref::Vec& dw, ref::Vec& dr, ref::Vec& db) {
  dx.assign(x.size(), 0.0), dw.assign(w.size(), 0.0), dr.assign(r.size(), 0.0), db.assign(size_t(c.u), 0.0);
  for (int64_t s = 0; s < c.n; ++s) {
    ref::Vec carry(size_t(c.u), 0.0);  // dL/dh_t through h_{t+1}
    for (int64_t t = c.t - 1; t >= 0; --t) {
      ref::Vec da(size_t(c.u));
      for (int64_t j = 0; j < c.u; ++j) {
        const size_t i = size_t((s * c.t + t) * c.u + j);
        da[size_t(j)] = (dh_out[i] + carry[size_t(j)]) * act_grad(c.act, h[i]);
      }
      for (int64_t j = 0; j < c.u; ++j) {
        db[size_t(j)] += da[size_t(j)];
        for (int64_t k = 0; k < c.f; ++k) {
          dw[size_t(k * c.u + j)] += x[size_t((s * c.t + t) * c.f + k)] * da[size_t(j)];
          dx[size_t((s * c.t + t) * c.f + k)] += w[size_t(k * c.u + j)] * da[size_t(j)];
        }
      }
      ref::Vec next(size_t(c.u), 0.0);
      if (t > 0)
        for (int64_t k = 0; k < c.u; ++k)
          for (int64_t j = 0; j < c.u; ++j) {
            dr[size_t(k * c.u + j)] += h[size_t((s * c.t + t - 1) * c.u + k)] * da[size_t(j)];
            next[size_t(k)] += r[size_t(k * c.u + j)] * da[size_t(j)];
          }
      carry = next;
    }
  }
}

const char* name(Act a) { return a == Act::Tanh ? "tanh" : a == Act::Relu ? "relu" : a == Act::Sigmoid ? "sigmoid" : "linear"; }

void run_case(OpContext& ctx, const Backend& be, const Case& c, bool seq, std::mt19937_64& rng, double tol) {
  INFO("n " << c.n << ", t " << c.t << ", f " << c.f << ", u " << c.u << ", " << name(c.act)
            << (seq ? ", sequences" : ", last step") << (c.bias ? "" : ", no bias") << (c.dx ? "" : ", no dx"));
  auto k = make_kernel<SimpleRnnKernel>(ctx, SimpleRnnParams{c.u, seq, c.bias, c.act});
  // Recurrent weights of a scale that neither explodes (relu, linear) nor saturates.
  const double rs = 0.8 / std::sqrt(double(c.u));
  Tensor hx = random_tensor({c.n, c.t, c.f}, rng), hw = random_tensor({c.f, c.u}, rng, -0.6, 0.6);
  Tensor hr = random_tensor({c.u, c.u}, rng, -rs, rs);
  Tensor hb = c.bias ? random_tensor({c.u}, rng, -0.5, 0.5) : Tensor();
  Tensor x = be.upload(hx), w = be.upload(hw), r = be.upload(hr), b = be.upload(hb);
  const Shape out = seq ? Shape{c.n, c.t, c.u} : Shape{c.n, c.u};
  Tensor y = be.nan(out);
  k->forward(x, w, r, b, y, true);
  const ref::Vec bv = c.bias ? to_vec(hb) : ref::Vec();
  const ref::Vec xv = to_vec(hx), wv = to_vec(hw), rv = to_vec(hr);
  const ref::Vec h = forward_ref(c, xv, wv, rv, c.bias ? &bv : nullptr);
  be.check("y", y, ref::rnn_output(h, c.n, c.t, c.u, seq), tol);
  Tensor hdy = random_tensor(out, rng), dy = be.upload(hdy);
  Tensor dx = c.dx ? be.nan(x.shape()) : Tensor(), dw = be.nan(w.shape()), dr = be.nan(r.shape());
  Tensor db = c.bias ? be.nan({c.u}) : Tensor();
  k->backward(x, w, r, dy, dx, dw, dr, db);
  ref::Vec rdx, rdw, rdr, rdb;
  backward_ref(c, xv, wv, rv, h, ref::rnn_dh(to_vec(hdy), c.n, c.t, c.u, seq), rdx, rdw, rdr, rdb);
  if (c.dx) be.check("dx", dx, rdx, tol);
  be.check("dw", dw, rdw, tol);
  be.check("dr", dr, rdr, tol);
  if (c.bias) be.check("db", db, rdb, tol);
}

}  // namespace

TEST_CASE("simple_rnn forward and backward match float64 reference in both output modes, every activation", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(91);
    std::vector<Case> cases = {{1, 1, 1, 1},          {1, 5, 3, 7},  {3, 1, 4, 5},   {4, 7, 9, 3},
                               {2, 13, 5, 11, false}, {5, 3, 17, 8, true, false},    {1, 2, 1, 2},
                               {16, 20, 32, 16},      {6, 4, 3, 33}, {40, 3, 2, 4}};
    for (int i = 0; i < 6; ++i)
      cases.push_back({uniform_int(rng, 1, 9), uniform_int(rng, 1, 12), uniform_int(rng, 1, 20),
                       uniform_int(rng, 1, 20), uniform_int(rng, 0, 3) != 0, uniform_int(rng, 0, 3) != 0});
    for (Act a : {Act::Tanh, Act::Relu, Act::Sigmoid, Act::Linear})
      for (Case c : cases) {
        c.act = a;
        for (bool seq : {true, false}) run_case(be.ctx(), be, c, seq, rng, be.tol);
      }
  }
}

// The time loop splits the batch between threads from a size on (cpu_recurrent.h).
TEST_CASE("simple_rnn with 1 to 4 CPU threads splitting the batch matches float64 reference") {
  for (int threads : {1, 2, 3, 4}) {
    INFO(threads << " threads");
    auto ctx = make_context(Device::cpu(), ContextOptions{threads});
    const Backend be{"cpu", ctx.get(), kCpuTolerance};
    std::mt19937_64 rng(92);
    for (bool seq : {true, false}) run_case(*ctx, be, {37, 30, 24, 64}, seq, rng, be.tol);
  }
}

TEST_CASE("simple_rnn backward needs a training forward of the same shape, shapes are checked, an empty batch", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(93);
    auto k = make_kernel<SimpleRnnKernel>(be.ctx(), SimpleRnnParams{3, false, true, Act::Tanh});
    Tensor x = be.upload(random_tensor({2, 4, 5}, rng)), w = be.upload(random_tensor({5, 3}, rng));
    Tensor r = be.upload(random_tensor({3, 3}, rng)), b = be.upload(random_tensor({3}, rng));
    Tensor y = be.empty({2, 3}), dy = be.upload(random_tensor({2, 3}, rng));
    Tensor dx = be.empty(x.shape()), dw = be.empty(w.shape()), dr = be.empty(r.shape()), db = be.empty({3});
    CHECK_THROWS_AS(k->backward(x, w, r, dy, dx, dw, dr, db), std::logic_error);
    k->forward(x, w, r, b, y, false);  // inference keeps nothing
    CHECK_THROWS_AS(k->backward(x, w, r, dy, dx, dw, dr, db), std::logic_error);
    k->forward(x, w, r, b, y, true);
    CHECK_NOTHROW(k->backward(x, w, r, dy, dx, dw, dr, db));
    const ref::Vec dw1 = be.vec(dw), dr1 = be.vec(dr);  // a second backward gives the same bits
    k->backward(x, w, r, dy, dx, dw, dr, db);
    be.check("dw again", dw, dw1, 0.0);
    be.check("dr again", dr, dr1, 0.0);
    CHECK_THROWS_AS(k->forward(x, be.upload(random_tensor({4, 3}, rng)), r, b, y, true), std::invalid_argument);
    CHECK_THROWS_AS(k->forward(x, w, r, be.upload(random_tensor({2, 3}, rng)), y, true), std::invalid_argument);
    CHECK_THROWS_AS(k->forward(x, w, r, Tensor(), y, true), std::invalid_argument);  // bias expected
    auto k0 = make_kernel<SimpleRnnKernel>(be.ctx(), SimpleRnnParams{2, true, true, Act::Relu});
    Tensor x0 = be.empty({0, 3, 4}), w0 = be.upload(random_tensor({4, 2}, rng)), r0 = be.upload(random_tensor({2, 2}, rng));
    Tensor b0 = be.upload(random_tensor({2}, rng)), y0 = be.empty({0, 3, 2});
    REQUIRE_NOTHROW(k0->forward(x0, w0, r0, b0, y0, true));
    Tensor dw0 = be.nan({4, 2}), dr0 = be.nan({2, 2}), db0 = be.nan({2}), dx0 = be.empty({0, 3, 4});
    REQUIRE_NOTHROW(k0->backward(x0, w0, r0, y0, dx0, dw0, dr0, db0));
    be.check("dw", dw0, ref::Vec(8, 0.0), 0.0);
    be.check("db", db0, ref::Vec(2, 0.0), 0.0);
  }
}
