// gru tests: forward and backward (both output modes) against the float64 reference on every backend, with threads splitting the batch; Keras's gate order and reset_after form by hand; misuse errors and an empty batch.
#include <cmath>

#include "backends.h"
#include "core/ops/gru.h"
#include "reference_rnn.h"

using namespace trainer;
using namespace trainer::test;

namespace {

struct Case {
  int64_t n, t, f, u;
  bool bias = true, dx = true;
};

void run_case(OpContext& ctx, const Backend& be, const Case& c, bool seq, std::mt19937_64& rng, double tol) {
  INFO("n " << c.n << ", t " << c.t << ", f " << c.f << ", u " << c.u << (seq ? ", sequences" : ", last step")
            << (c.bias ? "" : ", no bias") << (c.dx ? "" : ", no dx"));
  auto k = make_kernel<GruKernel>(ctx, GruParams{c.u, seq, c.bias});
  // Weights of Keras's initial scale, so that the gates neither saturate nor vanish.
  Tensor hx = random_tensor({c.n, c.t, c.f}, rng), hw = random_tensor({c.f, 3 * c.u}, rng, -0.6, 0.6);
  Tensor hr = random_tensor({c.u, 3 * c.u}, rng, -0.6, 0.6);
  Tensor hb = c.bias ? random_tensor({2, 3 * c.u}, rng, -0.5, 0.5) : Tensor();
  Tensor x = be.upload(hx), w = be.upload(hw), r = be.upload(hr), b = be.upload(hb);
  const Shape out = seq ? Shape{c.n, c.t, c.u} : Shape{c.n, c.u};
  Tensor y = be.nan(out);
  k->forward(x, w, r, b, y, true);
  const ref::Vec bv = c.bias ? to_vec(hb) : ref::Vec();
  const ref::Vec* bp = c.bias ? &bv : nullptr;
  const ref::Vec xv = to_vec(hx), wv = to_vec(hw), rv = to_vec(hr);
  be.check("y", y, ref::rnn_output(ref::gru_forward(xv, wv, rv, bp, c.n, c.t, c.f, c.u), c.n, c.t, c.u, seq), tol);

  Tensor hdy = random_tensor(out, rng), dy = be.upload(hdy);
  Tensor dx = c.dx ? be.nan(x.shape()) : Tensor(), dw = be.nan(w.shape()), dr = be.nan(r.shape());
  Tensor db = c.bias ? be.nan({2, 3 * c.u}) : Tensor();
  k->backward(x, w, r, dy, dx, dw, dr, db);
  ref::Vec rdx, rdw, rdr, rdb;
  ref::gru_backward(xv, wv, rv, bp, ref::rnn_dh(to_vec(hdy), c.n, c.t, c.u, seq), c.n, c.t, c.f, c.u, rdx, rdw, rdr, rdb);
  if (c.dx) be.check("dx", dx, rdx, tol);
  be.check("dw", dw, rdw, tol);
  be.check("dr", dr, rdr, tol);
  if (c.bias) be.check("db", db, rdb, tol);
}

}  // namespace

TEST_CASE("gru forward and backward match float64 reference in both output modes", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(81);
    std::vector<Case> cases = {{1, 1, 1, 1},          {1, 5, 3, 7},  {3, 1, 4, 5},   {4, 7, 9, 3},
                               {2, 13, 5, 11, false}, {5, 3, 17, 8, true, false},    {1, 2, 1, 2},
                               {16, 20, 32, 16},      {6, 4, 3, 33}, {40, 3, 2, 4}};
    for (int i = 0; i < 6; ++i)
      cases.push_back({uniform_int(rng, 1, 9), uniform_int(rng, 1, 12), uniform_int(rng, 1, 20),
                       uniform_int(rng, 1, 20), uniform_int(rng, 0, 3) != 0, uniform_int(rng, 0, 3) != 0});
    for (const Case& c : cases)
      for (bool seq : {true, false}) run_case(be.ctx(), be, c, seq, rng, be.tol);
  }
}

// The time loop splits the batch between threads from a size on (cpu_recurrent.h): 1 to 4 threads
// over a batch large enough to split, each against the reference.
TEST_CASE("gru with 1 to 4 CPU threads splitting the batch matches float64 reference") {
  for (int threads : {1, 2, 3, 4}) {
    INFO(threads << " threads");
    auto ctx = make_context(Device::cpu(), ContextOptions{threads});
    const Backend be{"cpu", ctx.get(), kCpuTolerance};
    std::mt19937_64 rng(82);
    for (bool seq : {true, false}) run_case(*ctx, be, {37, 30, 24, 40}, seq, rng, be.tol);
  }
}

TEST_CASE("gru on long sequences matches float64 reference", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(83);
    for (bool seq : {true, false}) run_case(be.ctx(), be, {3, 120, 6, 10}, seq, rng, be.tol);
  }
}

// Keras's gate order and reset_after, by hand: one unit, one feature, x = (1, 1), W = (wz, wr, wh),
// R = (rz, rr, rh), biases b_in, b_rec: h after two steps in closed form.
TEST_CASE("gru follows Keras's gate order z, r, h and applies the reset gate after the recurrent projection", "[backends]") {
  const double wz = 0.3, wr = -0.7, wh = 0.5, rz = 0.4, rr = 0.2, rh = -0.6;
  const double bi[3] = {0.1, -0.2, 0.05}, br[3] = {-0.1, 0.3, 0.2};
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  double h = 0;
  for (int step = 0; step < 2; ++step) {
    const double z = sig(wz + bi[0] + rz * h + br[0]), r = sig(wr + bi[1] + rr * h + br[1]);
    const double hh = std::tanh(wh + bi[2] + r * (rh * h + br[2]));  // reset after: r·(h·R_h + b_rec_h)
    h = z * h + (1 - z) * hh;
  }
  const ref::Vec b = {bi[0], bi[1], bi[2], br[0], br[1], br[2]};
  const ref::Vec want = ref::gru_forward({1.0, 1.0}, {wz, wr, wh}, {rz, rr, rh}, &b, 1, 2, 1, 1);
  CHECK(want[1] == Approx(h).epsilon(1e-12));
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<GruKernel>(be.ctx(), GruParams{1, true, true});
    Tensor y = be.nan({1, 2, 1});
    k->forward(be.upload(from_vec({1, 2, 1}, {1.0, 1.0})), be.upload(from_vec({1, 3}, {wz, wr, wh})),
               be.upload(from_vec({1, 3}, {rz, rr, rh})), be.upload(from_vec({2, 3}, b)), y, false);
    be.check("h", y, want);
  }
}

TEST_CASE("gru backward needs a training forward of the same shape, shapes are checked, an empty batch", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(84);
    auto k = make_kernel<GruKernel>(be.ctx(), GruParams{3, false, true});
    Tensor x = be.upload(random_tensor({2, 4, 5}, rng)), w = be.upload(random_tensor({5, 9}, rng));
    Tensor r = be.upload(random_tensor({3, 9}, rng)), b = be.upload(random_tensor({2, 9}, rng));
    Tensor y = be.empty({2, 3}), dy = be.upload(random_tensor({2, 3}, rng));
    Tensor dx = be.empty(x.shape()), dw = be.empty(w.shape()), dr = be.empty(r.shape()), db = be.empty({2, 9});
    CHECK_THROWS_AS(k->backward(x, w, r, dy, dx, dw, dr, db), std::logic_error);
    k->forward(x, w, r, b, y, false);  // inference keeps nothing
    CHECK_THROWS_AS(k->backward(x, w, r, dy, dx, dw, dr, db), std::logic_error);
    k->forward(x, w, r, b, y, true);
    CHECK_NOTHROW(k->backward(x, w, r, dy, dx, dw, dr, db));
    const ref::Vec dw1 = be.vec(dw), dr1 = be.vec(dr);  // a second backward gives the same bits
    k->backward(x, w, r, dy, dx, dw, dr, db);
    be.check("dw again", dw, dw1, 0.0);
    be.check("dr again", dr, dr1, 0.0);
    CHECK_THROWS_AS(k->forward(x, be.upload(random_tensor({4, 9}, rng)), r, b, y, true), std::invalid_argument);
    CHECK_THROWS_AS(k->forward(x, w, r, be.upload(random_tensor({9}, rng)), y, true), std::invalid_argument);  // [2, 3U]
    CHECK_THROWS_AS(k->forward(x, w, r, Tensor(), y, true), std::invalid_argument);                          // bias expected
    auto k0 = make_kernel<GruKernel>(be.ctx(), GruParams{2, true, true});
    Tensor x0 = be.empty({0, 3, 4}), w0 = be.upload(random_tensor({4, 6}, rng)), r0 = be.upload(random_tensor({2, 6}, rng));
    Tensor b0 = be.upload(random_tensor({2, 6}, rng)), y0 = be.empty({0, 3, 2});
    REQUIRE_NOTHROW(k0->forward(x0, w0, r0, b0, y0, true));
    Tensor dw0 = be.nan({4, 6}), dr0 = be.nan({2, 6}), db0 = be.nan({2, 6}), dx0 = be.empty({0, 3, 4});
    REQUIRE_NOTHROW(k0->backward(x0, w0, r0, y0, dx0, dw0, dr0, db0));
    be.check("dw", dw0, ref::Vec(24, 0.0), 0.0);
    be.check("db", db0, ref::Vec(12, 0.0), 0.0);
  }
}
