// lstm tests: forward and backward (both output modes) against the float64 reference on every backend, Keras' gate order, misuse errors.
#include <cmath>

#include "backends.h"
#include "core/ops/lstm.h"
#include "reference_rnn.h"

using namespace trainer;
using namespace trainer::test;

namespace {

struct Case {
  int64_t n, t, f, u;
  bool bias = true, dx = true;
};

// Runs one case on one backend and checks y, dx, dw, dr, db against the reference.
void run_case(const Backend& be, const Case& c, bool seq, std::mt19937_64& rng, double tol) {
  INFO("n " << c.n << ", t " << c.t << ", f " << c.f << ", u " << c.u << (seq ? ", sequences" : ", last step")
            << (c.bias ? "" : ", no bias") << (c.dx ? "" : ", no dx"));
  const LstmParams p{c.u, seq, c.bias};
  auto k = make_kernel<LstmKernel>(be.ctx(), p);
  // Weights of Keras' initial scale (glorot for [f, 4u] is about ±sqrt(6 / 5u)), so the gates
  // neither saturate nor vanish and every term of the gradient matters.
  Tensor hx = random_tensor({c.n, c.t, c.f}, rng), hw = random_tensor({c.f, 4 * c.u}, rng, -0.6, 0.6);
  Tensor hr = random_tensor({c.u, 4 * c.u}, rng, -0.6, 0.6);
  Tensor hb = c.bias ? random_tensor({4 * c.u}, rng, -0.5, 0.5) : Tensor();
  Tensor x = be.upload(hx), w = be.upload(hw), r = be.upload(hr), b = be.upload(hb);
  const Shape out = seq ? Shape{c.n, c.t, c.u} : Shape{c.n, c.u};
  Tensor y = be.nan(out);
  k->forward(x, w, r, b, y, true);
  const ref::Vec bv = c.bias ? to_vec(hb) : ref::Vec();
  const ref::Vec* bp = c.bias ? &bv : nullptr;
  const ref::Vec xv = to_vec(hx), wv = to_vec(hw), rv = to_vec(hr);
  be.check("y", y, ref::rnn_output(ref::lstm_forward(xv, wv, rv, bp, c.n, c.t, c.f, c.u), c.n, c.t, c.u, seq), tol);

  Tensor hdy = random_tensor(out, rng), dy = be.upload(hdy);
  Tensor dx = c.dx ? be.nan(x.shape()) : Tensor(), dw = be.nan(w.shape()), dr = be.nan(r.shape());
  Tensor db = c.bias ? be.nan({4 * c.u}) : Tensor();
  k->backward(x, w, r, y, dy, dx, dw, dr, db);
  ref::Vec rdx, rdw, rdr, rdb;
  ref::lstm_backward(xv, wv, rv, bp, ref::rnn_dh(to_vec(hdy), c.n, c.t, c.u, seq), c.n, c.t, c.f, c.u, rdx, rdw, rdr, rdb);
  if (c.dx) be.check("dx", dx, rdx, tol);
  be.check("dw", dw, rdw, tol);
  be.check("dr", dr, rdr, tol);
  if (c.bias) be.check("db", db, rdb, tol);
}

}  // namespace

TEST_CASE("lstm forward and backward match float64 reference in both output modes", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(71);
    std::vector<Case> cases = {{1, 1, 1, 1},           {1, 5, 3, 7},  {3, 1, 4, 5},         {4, 7, 9, 3},
                               {2, 13, 5, 11, false},  {5, 3, 17, 8, true, false}, {1, 2, 1, 2},
                               {16, 20, 32, 16},       {6, 4, 3, 33}, {40, 3, 2, 4}};
    for (int i = 0; i < 6; ++i)
      cases.push_back({uniform_int(rng, 1, 9), uniform_int(rng, 1, 12), uniform_int(rng, 1, 20),
                       uniform_int(rng, 1, 20), uniform_int(rng, 0, 3) != 0, uniform_int(rng, 0, 3) != 0});
    for (const Case& c : cases)
      for (bool seq : {true, false}) run_case(be, c, seq, rng, be.tol);
  }
}

TEST_CASE("lstm on long sequences matches float64 reference", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(72);
    for (bool seq : {true, false}) run_case(be, {3, 120, 6, 10}, seq, rng, be.tol);
  }
}

// Keras' gate order, by hand: with one unit, one feature and x = (1, 1), each gate's weight is
// its own column of w, so h after two steps is a closed form of the four weights.
TEST_CASE("lstm reference follows Keras' gate order i, f, c, o", "[backends]") {
  const double wi = 0.3, wf = -0.7, wc = 0.5, wo = 0.9;
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double i = sig(wi), f = sig(wf), g = std::tanh(wc), o = sig(wo);  // r = 0, b = 0, x = 1
  const double c1 = i * g, c2 = f * c1 + i * g;
  const ref::Vec h = ref::lstm_forward({1.0, 1.0}, {wi, wf, wc, wo}, {0, 0, 0, 0}, nullptr, 1, 2, 1, 1);
  CHECK(h[0] == Approx(o * std::tanh(c1)).epsilon(1e-12));
  CHECK(h[1] == Approx(o * std::tanh(c2)).epsilon(1e-12));
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<LstmKernel>(be.ctx(), LstmParams{1, true, false});
    Tensor y = be.nan({1, 2, 1});
    k->forward(be.upload(from_vec({1, 2, 1}, {1.0, 1.0})), be.upload(from_vec({1, 4}, {wi, wf, wc, wo})),
               be.upload(from_vec({1, 4}, {0, 0, 0, 0})), Tensor(), y, false);
    be.check("h", y, h);
  }
}

TEST_CASE("lstm backward needs a training forward of the same shape, shapes are checked", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(73);
    auto k = make_kernel<LstmKernel>(be.ctx(), LstmParams{3, false, true});
    Tensor x = be.upload(random_tensor({2, 4, 5}, rng)), w = be.upload(random_tensor({5, 12}, rng));
    Tensor r = be.upload(random_tensor({3, 12}, rng)), b = be.upload(random_tensor({12}, rng));
    Tensor y = be.empty({2, 3}), dy = be.upload(random_tensor({2, 3}, rng));
    Tensor dx = be.empty(x.shape()), dw = be.empty(w.shape()), dr = be.empty(r.shape()), db = be.empty({12});
    CHECK_THROWS_AS(k->backward(x, w, r, y, dy, dx, dw, dr, db), std::logic_error);
    k->forward(x, w, r, b, y, false);  // inference keeps nothing
    CHECK_THROWS_AS(k->backward(x, w, r, y, dy, dx, dw, dr, db), std::logic_error);
    k->forward(x, w, r, b, y, true);
    CHECK_NOTHROW(k->backward(x, w, r, y, dy, dx, dw, dr, db));
    // The same input twice gives the same gradients (backward leaves the kept forward intact).
    const ref::Vec dw1 = be.vec(dw), dr1 = be.vec(dr);
    k->backward(x, w, r, y, dy, dx, dw, dr, db);
    be.check("dw again", dw, dw1, 0.0);
    be.check("dr again", dr, dr1, 0.0);
    Tensor x3 = be.upload(random_tensor({3, 4, 5}, rng)), y3 = be.empty({3, 3});
    CHECK_THROWS_AS(k->backward(x3, w, r, y3, be.upload(random_tensor({3, 3}, rng)), dx, dw, dr, db),
                    std::invalid_argument);  // dx has x's old shape
    Tensor bad_w = be.upload(random_tensor({4, 12}, rng));
    CHECK_THROWS_AS(k->forward(x, bad_w, r, b, y, true), std::invalid_argument);
    Tensor bad_y = be.empty({2, 4, 3});  // return_sequences is off
    CHECK_THROWS_AS(k->forward(x, w, r, b, bad_y, true), std::invalid_argument);
    CHECK_THROWS_AS(k->forward(x, w, r, Tensor(), y, true), std::invalid_argument);  // bias expected
    Tensor flat = be.upload(random_tensor({2, 20}, rng));
    CHECK_THROWS_AS(k->forward(flat, w, r, b, y, true), std::invalid_argument);
  }
}

TEST_CASE("lstm handles an empty batch", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(74);
    auto k = make_kernel<LstmKernel>(be.ctx(), LstmParams{2, true, true});
    Tensor x = be.empty({0, 3, 4}), w = be.upload(random_tensor({4, 8}, rng)), r = be.upload(random_tensor({2, 8}, rng));
    Tensor b = be.upload(random_tensor({8}, rng)), y = be.empty({0, 3, 2});
    REQUIRE_NOTHROW(k->forward(x, w, r, b, y, true));
    Tensor dw = be.nan({4, 8}), dr = be.nan({2, 8}), db = be.nan({8}), dx = be.empty({0, 3, 4});
    REQUIRE_NOTHROW(k->backward(x, w, r, y, y, dx, dw, dr, db));
    be.check("dw", dw, ref::Vec(32, 0.0), 0.0);
    be.check("dr", dr, ref::Vec(16, 0.0), 0.0);
    be.check("db", db, ref::Vec(8, 0.0), 0.0);
  }
}
