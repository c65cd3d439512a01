// Low-precision (bf16, f16) activations in pool2d (max, avg), global_pool and pad2d on every backend against float64; type mixes refused.
#include <algorithm>
#include <numeric>
#include <sstream>

#include "bf16_check.h"
#include "core/ops/pad2d.h"
#include "core/ops/pooling.h"

using namespace trainer;
using namespace trainer::test;

namespace {

namespace b16 = trainer::test::bf16_check;
using b16::Low;
constexpr DType F = DType::F32;

// Random values in [-1, 1) rounded to the low type: the kernel's inputs exactly, for the reference too.
Tensor random_low(const Shape& s, std::mt19937_64& rng, DType t) { return b16::make(s, t, b16::random_values(s, rng, t)); }

// Values of 8 significant bits (exact in bf16 and f16), different within each channel of each
// sample, in random order: ±(1 + m/128) · 2^-e, 256 per exponent. Max pooling's inputs: with a tie
// in a window the position that gets the gradient would be the kernel's choice, and random values
// rounded to bf16 (128 per octave) tie often.
Tensor distinct_low(const Shape& s, std::mt19937_64& rng, DType t) {
  const int64_t n = s[0], hw = s[1] * s[2], c = s[3];
  REQUIRE(hw <= 256 * 10);  // exponents stay far from underflow (f16's smallest normal is 2^-14)
  ref::Vec v(size_t(s.numel()));
  std::vector<int64_t> order(static_cast<size_t>(hw));
  for (int64_t i = 0; i < n * c; ++i) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t p = 0; p < hw; ++p) {
      const int64_t k = order[size_t(p)];
      const double m = std::ldexp(1.0 + double((k >> 1) & 127) / 128.0, -int(k >> 8));
      v[size_t(((i / c) * hw + p) * c + i % c)] = k & 1 ? -m : m;
    }
  }
  return b16::make(s, t, v);  // exact: 8 significant bits
}

// Every element of `got` within bounds[i] of `want` (0: exactly equal); NaN fails.
void check_within(const std::string& what, const Tensor& got, const ref::Vec& want, const ref::Vec& bounds) {
  REQUIRE(size_t(got.numel()) == want.size());
  ref::Vec g = b16::values(got);
  double worst = 0, fraction = 0;
  size_t at = 0, bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(g[i] - want[i]);
    if (std::isnan(err)) err = INFINITY;
    if (bounds[i] > 0) fraction = std::max(fraction, err / bounds[i]);
    if (err > bounds[i]) ++bad, at = i, worst = std::max(worst, err - bounds[i]);
  }
  INFO(what << ": " << bad << " of " << want.size() << " over their bound, largest excess " << worst << " (at " << at
            << "); largest fraction of a bound " << fraction);
  CHECK(bad == 0);
}

void check_exact(const std::string& what, const Tensor& got, const ref::Vec& want) {
  check_within(what, got, want, ref::Vec(want.size(), 0.0));
}

// bound[i] = a · |want[i]| + b · mag[i] + eta, eta the rounding's underflow term of the stored type
// (b16::underflow: 2^-25 for f16, whose subnormal step is fixed) for the bounds of a rounded result
// (a or b > 0); exact checks pass a = b = 0 and get 0.
ref::Vec bounds(const ref::Vec& want, double a, const ref::Vec& mag, double b, DType stored) {
  REQUIRE(want.size() == mag.size());
  const double eta = a > 0 || b > 0 ? b16::underflow(stored) : 0.0;
  ref::Vec r(want.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = a * std::fabs(want[i]) + b * mag[i] + eta;
  return r;
}

ref::Vec absolute(ref::Vec v) {
  for (double& e : v) e = std::fabs(e);
  return v;
}

struct PoolCase {
  int64_t n, h, w, c;
  int k, s;  // square window and stride
  Padding pad;
};

std::string describe(const PoolCase& k, bool max) {
  std::ostringstream o;
  o << (max ? "max" : "avg") << " pool " << k.k << "x" << k.k << "/" << k.s << " " << padding_name(k.pad) << " on "
    << k.n << "x" << k.h << "x" << k.w << "x" << k.c;
  return o.str();
}

ref::PoolDims dims_of(const PoolCase& k, int64_t n) {
  Window1d h = window_1d(k.h, k.k, k.s, 1, k.pad), w = window_1d(k.w, k.k, k.s, 1, k.pad);
  return {n, k.h, k.w, k.c, h.out, w.out, k.k, k.k, k.s, k.s, h.pad_before, w.pad_before};
}

std::shared_ptr<Pool2dKernel> pool_kernel(const Low& lo, const PoolCase& k, bool max) {
  Pool2dParams p;
  p.kind = max ? PoolKind::Max : PoolKind::Avg;
  p.kh = p.kw = k.k, p.sh = p.sw = k.s, p.padding = k.pad;
  return make_kernel<Pool2dKernel>(lo.ctx(), p);
}

// The bound of pool2d's dx: an element's gradient sums the contributions of the (at most W)
// windows that hold it, and oneDNN 2.6 adds them up in the bf16 diff_src itself where windows
// overlap, so each addition may round: every rounding is off by <= u times the partial sum, which
// is <= mag = Σ|contributions|, so W rounding steps (a single rounding without overlap) give
// <= W · u · mag (CUDA sums in f32 and rounds once: within it). Average pooling's contributions
// dy / count are f32 products (+2^-23 relative each, far below). A dropped or misplaced
// contribution is off by a whole |dy|.
double pool_dx_factor(const PoolCase& k, double u) {
  int64_t per_dim = (k.k + k.s - 1) / k.s;
  return double(per_dim * per_dim) * (u + 0x1p-22);
}

// Max pooling in the low type: the forward selects one of the inputs, so it is exact (training
// and inference); backward within pool_dx_factor (exact without overlapping windows).
void check_max(const Low& lo, const PoolCase& k, std::mt19937_64& rng) {
  INFO(describe(k, true));
  const DType L = lo.type;
  auto kernel = pool_kernel(lo, k, true);
  ref::PoolDims d = dims_of(k, k.n);
  Tensor xh = distinct_low({k.n, k.h, k.w, k.c}, rng, L);
  Tensor x = lo.up(xh), y = lo.up(b16::nan_of({k.n, d.oh, d.ow, k.c}, L));
  kernel->forward(x, y, true);
  ref::Vec xv = b16::values(xh);
  check_exact("y", lo.down(y), ref::pool2d_forward(d, xv, true));
  Tensor dyh = random_low(y.shape(), rng, L), dx = lo.up(b16::nan_of(x.shape(), L));
  kernel->backward(x, y, lo.up(dyh), dx);
  ref::Vec dyv = b16::values(dyh), want_dx = ref::pool2d_backward(d, xv, dyv, true);
  check_within("dx", lo.down(dx), want_dx,
               bounds(want_dx, 0, ref::pool2d_backward(d, xv, absolute(dyv), true),
                      k.s >= k.k ? 0 : pool_dx_factor(k, lo.u()), L));
  Tensor yi = lo.up(b16::nan_of(y.shape(), L));
  kernel->forward(x, yi, false);
  check_exact("y (inference)", lo.down(yi), ref::pool2d_forward(d, xv, true));
}

// Average pooling in the low type, excluding the padding: y sums at most k² inputs in f32 and
// scales by the count (<= (k² + 2) · 2^-23 · mag, mag = the average of |x|), then rounds once
// (<= u |y| and u times that error). dx: pool_dx_factor.
void check_avg(const Low& lo, const PoolCase& k, std::mt19937_64& rng) {
  INFO(describe(k, false));
  const DType L = lo.type;
  const double u = lo.u();
  auto kernel = pool_kernel(lo, k, false);
  ref::PoolDims d = dims_of(k, k.n);
  Tensor xh = random_low({k.n, k.h, k.w, k.c}, rng, L);
  Tensor x = lo.up(xh), y = lo.up(b16::nan_of({k.n, d.oh, d.ow, k.c}, L));
  kernel->forward(x, y, true);
  ref::Vec xv = b16::values(xh), want = ref::pool2d_forward(d, xv, false);
  const double acc = double(k.k * k.k + 2) * 0x1p-23;
  check_within("y", lo.down(y), want, bounds(want, u, ref::pool2d_forward(d, absolute(xv), false), acc * (1 + u), L));
  Tensor dyh = random_low(y.shape(), rng, L), dx = lo.up(b16::nan_of(x.shape(), L));
  kernel->backward(x, y, lo.up(dyh), dx);
  ref::Vec dyv = b16::values(dyh), want_dx = ref::pool2d_backward(d, xv, dyv, false);
  check_within("dx", lo.down(dx), want_dx,
               bounds(want_dx, 0, ref::pool2d_backward(d, xv, absolute(dyv), false), pool_dx_factor(k, u), L));
}

const std::vector<PoolCase>& pool_cases() {
  const Padding S = Padding::Same, V = Padding::Valid;
  static const std::vector<PoolCase> cases = {
      {2, 8, 8, 3, 2, 2, V},     // Keras default: no overlap
      {2, 9, 7, 5, 2, 2, S},     // odd sizes, same: padding after
      {2, 32, 32, 4, 3, 2, V},   // MiniGoogLeNet's 3/2: overlapping windows
      {2, 9, 9, 16, 3, 1, S},    // stride 1 with padding on every side
      {1, 7, 6, 3, 3, 2, S},     // batch 1, odd sizes
      {2, 16, 16, 64, 3, 2, S},  // many channels: oneDNN's vector paths
  };
  return cases;
}

}  // namespace

TEST_CASE("low-precision pool2d: max is exact forward and within the bound backward, avg within its bounds", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(81);
    for (const PoolCase& k : pool_cases()) {
      check_max(lo, k, rng);
      check_avg(lo, k, rng);
    }
  }
}

TEST_CASE("low-precision pool2d: one kernel pairs each backward with its forward across f32 and low inputs of one shape", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    PoolCase k{2, 9, 9, 6, 3, 2, Padding::Valid};
    std::mt19937_64 rng(82);
    auto kernel = pool_kernel(lo, k, true);
    ref::PoolDims d = dims_of(k, 2);
    // Forwards of one shape in both types, and one of another batch, then their backwards in
    // reverse order: plans and argmax workspaces are kept per type, shape and buffer.
    std::vector<Tensor> xh = {distinct_low({2, 9, 9, 6}, rng, lo.type), distinct_low({2, 9, 9, 6}, rng, lo.type),
                              distinct_low({1, 9, 9, 6}, rng, lo.type)};
    xh[0] = b16::make(xh[0].shape(), F, b16::values(xh[0]));
    std::vector<Tensor> xs, ys;
    for (const Tensor& h : xh) {
      xs.push_back(lo.up(h));
      ys.push_back(lo.up(b16::nan_of({h.dim(0), d.oh, d.ow, 6}, h.dtype())));
      kernel->forward(xs.back(), ys.back(), true);
      d.n = h.dim(0);
      check_exact("y", lo.down(ys.back()), ref::pool2d_forward(d, b16::values(h), true));
    }
    for (int i = 2; i >= 0; --i) {
      INFO("input " << i << ", " << dtype_name(xh[size_t(i)].dtype()));
      // dy of magnitudes 1..2 in steps of 1/8: sums of up to 4 of them are exact in bf16, f16 and f32.
      ref::Vec g(size_t(ys[size_t(i)].numel()));
      for (double& e : g) e = 1.0 + double(uniform_int(rng, 0, 8)) / 8.0;
      const DType t = xh[size_t(i)].dtype();
      Tensor dyh = b16::make(ys[size_t(i)].shape(), t, g);
      Tensor dx = lo.up(b16::nan_of(xh[size_t(i)].shape(), t));
      kernel->backward(xs[size_t(i)], ys[size_t(i)], lo.up(dyh), dx);
      d.n = xh[size_t(i)].dim(0);
      check_exact("dx", lo.down(dx), ref::pool2d_backward(d, b16::values(xh[size_t(i)]), g, true));
    }
  }
}

TEST_CASE("low-precision global_pool: max is exact, avg within its bound", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    const DType L = lo.type;
    const double u = lo.u();
    std::mt19937_64 rng(83);
    for (PoolKind kind : {PoolKind::Avg, PoolKind::Max}) {
      const bool max = kind == PoolKind::Max;
      auto k = make_kernel<GlobalPoolKernel>(lo.ctx(), GlobalPoolParams{kind});
      for (Shape s : {Shape{2, 7, 7, 336}, Shape{1, 1, 1, 5}, Shape{3, 5, 4, 17}, Shape{64, 8, 8, 10}}) {
        INFO((max ? "max" : "avg") << " over [" << s.str() << "]");
        const int64_t n = s[0], hw = s[1] * s[2], c = s[3];
        Tensor xh = max ? distinct_low(s, rng, L) : random_low(s, rng, L);
        Tensor x = lo.up(xh), y = lo.up(b16::nan_of({n, c}, L));
        k->forward(x, y);
        ref::Vec xv = b16::values(xh), want = ref::global_pool_forward(xv, n, hw, c, max);
        Tensor dyh = random_low(y.shape(), rng, L), dx = lo.up(b16::nan_of(s, L));
        k->backward(x, y, lo.up(dyh), dx);
        ref::Vec dyv = b16::values(dyh), want_dx = ref::global_pool_backward(xv, dyv, n, hw, c, max);
        if (max) {  // selections and copies
          check_exact("y", lo.down(y), want);
          check_exact("dx", lo.down(dx), want_dx);
          continue;
        }
        // y: hw terms summed in f32 and scaled by the rounded 1/hw, (hw + 2) · 2^-23 · mag (mag =
        // the mean of |x|), then rounded once. dx = dy · (1/hw) rounded once.
        const double acc = double(hw + 2) * 0x1p-23;
        check_within("y", lo.down(y), want,
                     bounds(want, u, ref::global_pool_forward(absolute(xv), n, hw, c, false), acc * (1 + u), L));
        check_within("dx", lo.down(dx), want_dx, bounds(want_dx, u, absolute(want_dx), 2 * 0x1p-23, L));
      }
    }
  }
}

TEST_CASE("low-precision pad2d: forward and backward copy the low type exactly", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    const DType L = lo.type;
    std::mt19937_64 rng(84);
    for (ref::PadDims d : {ref::PadDims{2, 5, 6, 3, 1, 1, 1, 1}, ref::PadDims{1, 7, 7, 4, 0, 1, 0, 1},
                           ref::PadDims{3, 5, 4, 3, 2, 1, 3, 0}, ref::PadDims{4, 56, 56, 24, 0, 1, 0, 1}}) {
      Pad2dParams p{d.top, d.bottom, d.left, d.right};
      auto k = make_kernel<Pad2dKernel>(lo.ctx(), p);
      Shape xs{d.n, d.h, d.w, d.c}, ys = pad2d_output_shape(xs.without_batch(), p).with_batch(d.n);
      INFO("x [" << xs.str() << "] -> y [" << ys.str() << "]");
      Tensor xh = random_low(xs, rng, L), y = lo.up(b16::nan_of(ys, L));
      k->forward(lo.up(xh), y);
      check_exact("y", lo.down(y), ref::pad2d_forward(d, b16::values(xh)));
      Tensor dyh = random_low(ys, rng, L), dx = lo.up(b16::nan_of(xs, L));
      k->backward(lo.up(dyh), dx);
      check_exact("dx", lo.down(dx), ref::pad2d_backward(d, b16::values(dyh)));
    }
  }
}

TEST_CASE("low-precision pool2d, global_pool and pad2d refuse mixed activation types", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(85);
    auto mk = [&](const Shape& s, DType t) { return lo.up(b16::make(s, t, b16::random_values(s, rng, t))); };
    Shape xs{2, 6, 6, 4}, ps{2, 3, 3, 4}, gs{2, 4}, pads{2, 7, 8, 4};
    for (DType t : {F, lo.type}) {
      const DType o = t == F ? lo.type : F;
      INFO("x " << dtype_name(t));
      auto pool = pool_kernel(lo, {2, 6, 6, 4, 2, 2, Padding::Valid}, true);
      Tensor x = mk(xs, t), y = mk(ps, t), y_o = mk(ps, o), dx = mk(xs, t), dx_o = mk(xs, o);
      CHECK_THROWS_AS(pool->forward(x, y_o, true), std::invalid_argument);
      REQUIRE_NOTHROW(pool->forward(x, y, true));
      CHECK_THROWS_AS(pool->backward(x, y, y_o, dx), std::invalid_argument);
      CHECK_THROWS_AS(pool->backward(x, y, y, dx_o), std::invalid_argument);
      REQUIRE_NOTHROW(pool->backward(x, y, y, dx));

      auto global = make_kernel<GlobalPoolKernel>(lo.ctx(), GlobalPoolParams{PoolKind::Avg});
      Tensor g = mk(gs, t), g_o = mk(gs, o);
      CHECK_THROWS_AS(global->forward(x, g_o), std::invalid_argument);
      CHECK_THROWS_AS(global->backward(x, g, g_o, dx), std::invalid_argument);
      CHECK_THROWS_AS(global->backward(x, g, g, dx_o), std::invalid_argument);
      REQUIRE_NOTHROW(global->forward(x, g));

      auto pad = make_kernel<Pad2dKernel>(lo.ctx(), Pad2dParams{1, 0, 1, 1});
      Tensor py = mk(pads, t), py_o = mk(pads, o);
      CHECK_THROWS_AS(pad->forward(x, py_o), std::invalid_argument);
      CHECK_THROWS_AS(pad->backward(py_o, dx), std::invalid_argument);
      REQUIRE_NOTHROW(pad->backward(py, dx));
    }
    Tensor i32 = lo.up(Tensor::empty(xs, DType::I32)), y = mk(ps, F);
    CHECK_THROWS_AS(pool_kernel(lo, {2, 6, 6, 4, 2, 2, Padding::Valid}, false)->forward(i32, y, true),
                    std::invalid_argument);
  }
}

TEST_CASE("low-precision pool2d max: a window holding a NaN gives NaN, training and inference", "[backends]") {
  for (const Low& lo : b16::lows()) SECTION(lo.name()) {
    std::mt19937_64 rng(86);
    for (const PoolCase& k : {PoolCase{2, 7, 9, 5, 2, 2, Padding::Valid}, PoolCase{3, 8, 5, 17, 3, 1, Padding::Same}}) {
      INFO(describe(k, true));
      const ref::PoolDims d = dims_of(k, k.n);
      const Shape xs{k.n, k.h, k.w, k.c};
      ref::Vec v = b16::values(distinct_low(xs, rng, lo.type));
      for (size_t i : {size_t(3), v.size() / 2, v.size() - 1}) v[i] = NAN;
      const ref::Vec want = ref::pool2d_forward(d, v, true);  // NaN where a window holds one
      for (bool training : {true, false}) {
        INFO((training ? "training" : "inference"));
        auto kernel = pool_kernel(lo, k, true);
        Tensor y = lo.up(b16::nan_of({k.n, d.oh, d.ow, k.c}, lo.type));
        kernel->forward(lo.up(b16::make(xs, lo.type, v)), y, training);
        const auto [nans, wrong] = ref::match_with_nans(b16::values(lo.down(y)), want);
        CHECK(nans > 0);
        CHECK(wrong == 0);
      }
    }
  }
}
