// Kernel math: pool_math.h (the CUDA pooling kernels' windows, divisors, first-maximum rule and backward gather; global pooling's rules shared with the CPU) against the float64 reference.
#include "core/ops/math/pool_math.h"

#include "core/ops/window.h"
#include "kernel_math_util.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;

namespace {

struct Case {
  int64_t n, h, w, c;
  int kh, kw, sh, sw;
  Padding pad;
};

struct Run {
  ref::Vec y, dx;
};

// cuda_pooling.cu on the host: pool_forward_kernel's loop over outputs (keeping the argmax), then
// pool_backward_kernel's over inputs. `arg_rule_last` is a deliberately wrong argmax (the last
// maximum, '>='); `divisor_with_padding` a wrong average (padding counted).
Run run(const pool_math::PoolGeom& g, const std::vector<float>& x, const std::vector<float>& dy, bool is_max,
        bool arg_rule_last = false, bool divisor_with_padding = false) {
  const int64_t outs = int64_t(g.n) * g.oh * g.ow * g.c, ins = int64_t(g.n) * g.ih * g.iw * g.c;
  Run r;
  std::vector<int> arg(static_cast<size_t>(outs));
  for (int64_t i = 0; i < outs; ++i) {
    const pool_math::Window w = pool_math::output_window(g, i);
    if (is_max) {
      r.y.push_back(pool_math::window_max(g, w, HostLoad{x.data()}, arg[i]));
      if (arg_rule_last) {
        float best = -INFINITY;
        for (int ky = w.ky0; ky < w.ky1; ++ky)
          for (int kx = w.kx0; kx < w.kx1; ++kx) {
            const int pos = (w.y0 + ky) * g.iw + (w.x0 + kx);
            const float v = x[w.base + int64_t(pos) * g.c];
            if (v >= best) best = v, arg[i] = pos;
          }
      }
    } else {
      const float v = pool_math::window_avg(g, w, HostLoad{x.data()});
      r.y.push_back(divisor_with_padding ? v * pool_math::in_bounds_count(w) / (g.kh * g.kw) : v);
    }
  }
  for (int64_t i = 0; i < ins; ++i)
    r.dx.push_back(pool_math::input_grad(g, i, is_max, arg.data(), HostLoad{dy.data()}));
  return r;
}

void check_case(const Case& k, std::mt19937_64& rng) {
  const Window1d h = window_1d(k.h, k.kh, k.sh, 1, k.pad), w = window_1d(k.w, k.kw, k.sw, 1, k.pad);
  const pool_math::PoolGeom g{int(k.n), int(k.h), int(k.w), int(k.c), int(h.out), int(w.out), k.kh, k.kw, k.sh, k.sw,
                              h.pad_before, w.pad_before};
  const ref::PoolDims d{k.n, k.h, k.w, k.c, h.out, w.out, k.kh, k.kw, k.sh, k.sw, h.pad_before, w.pad_before};
  INFO(k.kh << "x" << k.kw << "/" << k.sh << "x" << k.sw << " " << padding_name(k.pad) << " on " << k.n << "x" << k.h
            << "x" << k.w << "x" << k.c);
  // Values on a grid of 1/8 so that windows hold ties (the first-maximum rule matters).
  std::vector<float> x = to_floats(random_floats(size_t(k.n * k.h * k.w * k.c), rng, -1, 1));
  for (float& v : x) v = std::round(v * 8) / 8;
  const std::vector<float> dy = to_floats(random_floats(size_t(k.n * h.out * w.out * k.c), rng));
  const ref::Vec xv = to_doubles(x), dyv = to_doubles(dy);
  // Max: the value is one of x's, exactly; each input's gradient sums at most (kh/sh + 1)·(kw/sw + 1)
  // dy values in float.
  const double terms = double((k.kh / k.sh + 1) * (k.kw / k.sw + 1));
  const Run mx = run(g, x, dy, true), last = run(g, x, dy, true, true);
  check_within("max y", mx.y, ref::pool2d_forward(d, xv, true), 0.0);
  const ref::Vec want_dx = ref::pool2d_backward(d, xv, dyv, true);
  if (scaled_err(last.dx, want_dx) > 0) check_tight("max dx", mx.dx, want_dx, terms * kU, last.dx);
  else check_within("max dx", mx.dx, want_dx, terms * kU);  // no window with a tie here
  // Avg: a float sum of at most kh·kw values, one division.
  const double tol = (k.kh * k.kw + 1) * kU;
  const Run av = run(g, x, dy, false), padded = run(g, x, dy, false, false, true);
  const ref::Vec want_y = ref::pool2d_forward(d, xv, false);
  bool clipped = false;  // some window reaches into the padding
  for (int64_t i = 0; i < int64_t(want_y.size()); ++i)
    clipped = clipped || pool_math::in_bounds_count(pool_math::output_window(g, i)) < k.kh * k.kw;
  if (clipped) check_tight("avg y", av.y, want_y, tol, padded.y);
  else check_within("avg y", av.y, want_y, tol);  // every window in bounds: nothing to exclude
  check_within("avg dx", av.dx, ref::pool2d_backward(d, xv, dyv, false), terms * tol);
}

}  // namespace

TEST_CASE("kernel math: pooling windows (Keras padding, divisor, first maximum, gather) match float64") {
  const Padding S = Padding::Same, V = Padding::Valid;
  std::mt19937_64 rng(431);
  const Case cases[] = {
      {2, 8, 8, 3, 2, 2, 2, 2, V},  {2, 9, 7, 5, 2, 2, 2, 2, V},  {2, 9, 7, 5, 2, 2, 2, 2, S},
      {2, 32, 32, 4, 3, 3, 2, 2, V}, {1, 15, 15, 7, 3, 3, 2, 2, S}, {2, 6, 7, 3, 3, 3, 1, 1, S},
      {2, 10, 11, 2, 3, 2, 3, 2, S}, {2, 2, 3, 3, 5, 5, 1, 1, S},  {3, 7, 7, 16, 7, 7, 1, 1, V},
      {2, 5, 5, 33, 1, 1, 2, 2, V},  {1, 1, 1, 1, 1, 1, 1, 1, V},  {1, 1, 1, 1, 3, 3, 2, 2, S},
      {1, 3, 5, 1, 2, 3, 1, 2, S},   {0, 4, 4, 2, 2, 2, 2, 2, V},  {2, 4, 4, 0, 2, 2, 2, 2, S}};
  for (const Case& c : cases) check_case(c, rng);
  for (int done = 0; done < 60;) {
    const Case c{uniform_int(rng, 1, 3),         uniform_int(rng, 1, 11),       uniform_int(rng, 1, 11),
                 uniform_int(rng, 1, 9),         int(uniform_int(rng, 1, 5)),   int(uniform_int(rng, 1, 5)),
                 int(uniform_int(rng, 1, 3)),    int(uniform_int(rng, 1, 3)),
                 uniform_int(rng, 0, 1) ? S : V};
    if (window_1d(c.h, c.kh, c.sh, 1, c.pad).out == 0 || window_1d(c.w, c.kw, c.sw, 1, c.pad).out == 0) continue;
    check_case(c, rng);
    ++done;
  }
}

TEST_CASE("kernel math: window bounds and covering outputs agree with a direct scan") {
  // clip_window is the in-bounds part of a window; covering lists exactly the outputs whose window
  // holds an input index: checked against brute force over small sizes.
  int64_t bad = 0;
  for (int in = 1; in <= 9; ++in)
    for (int k = 1; k <= 5; ++k)
      for (int s = 1; s <= 3; ++s)
        for (int p = 0; p < k; ++p) {
          const int out = (in + 2 * p - k) / s + 1;
          if (out <= 0) continue;
          for (int o = 0; o < out; ++o) {
            int k0, k1;
            pool_math::clip_window(o * s - p, k, in, k0, k1);
            for (int t = 0; t < k; ++t) bad += (t >= k0 && t < k1) != (o * s - p + t >= 0 && o * s - p + t < in);
          }
          for (int i = 0; i < in; ++i) {
            int o0, o1;
            pool_math::covering(i, k, s, p, out, o0, o1);
            for (int o = 0; o < out; ++o) bad += (o >= o0 && o <= o1) != (o * s - p <= i && i <= o * s - p + k - 1);
          }
        }
  CHECK(bad == 0);
}

TEST_CASE("kernel math: global pooling rules (the CPU's and the GPU's) match float64, first maximum on ties") {
  std::mt19937_64 rng(432);
  for (int64_t hw : {1, 35, 1000}) {
    INFO("hw " << hw);
    const int64_t n = 2, C = 3;
    std::vector<float> x = to_floats(random_floats(size_t(n * hw * C), rng));
    for (float& v : x) v = std::round(v * 4) / 4;  // ties
    const std::vector<float> dy = to_floats(random_floats(size_t(n * C), rng));
    ref::Vec avg, mx, dx_max(x.size(), 0.0), dx_last(x.size(), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < C; ++c) {
        auto col = [&](int64_t s) { return x[(i * hw + s) * C + c]; };
        avg.push_back(pool_math::global_forward(hw, true, pool_math::global_inv(hw), col));
        const float m = pool_math::global_forward(hw, false, 0.0f, col);
        mx.push_back(m);
        const int64_t at = pool_math::global_argmax(hw, m, col);
        REQUIRE(at >= 0);
        dx_max[(i * hw + at) * C + c] = dy[i * C + c];
        int64_t last = 0;
        for (int64_t s = 0; s < hw; ++s)
          if (col(s) == m) last = s;
        dx_last[(i * hw + last) * C + c] = dy[i * C + c];
      }
    const ref::Vec xv = to_doubles(x);
    check_within("avg", avg, ref::global_pool_forward(xv, n, hw, C, false), double(hw + 1) * kU);
    check_within("max", mx, ref::global_pool_forward(xv, n, hw, C, true), 0.0);
    const ref::Vec want = ref::global_pool_backward(xv, to_doubles(dy), n, hw, C, true);
    if (hw > 1) check_tight("max dx", dx_max, want, 0.0, dx_last);
    else check_within("max dx", dx_max, want, 0.0);
  }
  // A NaN is the maximum once seen (PyTorch's max pooling), and the first NaN takes the gradient.
  CHECK(std::isnan(pool_math::max_step(1.0f, NAN)));
  CHECK(std::isnan(pool_math::max_step(NAN, 2.0f)));
  CHECK(pool_math::global_argmax(3, NAN, [](int64_t s) { return s == 0 ? 1.0f : NAN; }) == 1);
  CHECK(pool_math::global_argmax(3, 5.0f, [](int64_t) { return 1.0f; }) == -1);
}
