// Kernel math: activation_math.h (the activation kernels of both backends, batch norm's fused clamp) against the float64 reference.
#include "core/ops/math/activation_math.h"

#include "core/ops/math/batchnorm_math.h"
#include "kernel_math_util.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;

namespace {

// The kinds by the reference's index (ActKind order): 1 relu, 2 relu6, 3 sigmoid, 4 tanh.
constexpr ActKind kKinds[] = {ActKind::Linear, ActKind::Relu, ActKind::Relu6, ActKind::Sigmoid, ActKind::Tanh};

float forward(int kind, float x) {
  switch (kind) {
    case 1:
    case 2: return act::clamp(x, act::clamp_of(kKinds[kind]));
    case 3: return act::sigmoid(x);
    case 4: return act::tanh_of(x);
    default: return x;
  }
}

// From the output y, as both backends' backward (backward_reads_y).
float backward(int kind, float y, float dy) {
  switch (kind) {
    case 1:
    case 2: return act::through(dy, y, act::clamp_of(kKinds[kind]));
    case 3: return act::sigmoid_grad(y, dy);
    case 4: return act::tanh_grad(y, dy);
    default: return dy;
  }
}

}  // namespace

// Forward: a few roundings of values of magnitude <= 6 (expf and tanhf within an ulp or two):
// 8u of the largest output. Backward from the rounded output: that output's error times a
// derivative of magnitude <= 1, plus three roundings: 16u.
TEST_CASE("kernel math: activation forward and backward from y match float64 on random inputs") {
  std::mt19937_64 rng(401);
  for (int kind = 1; kind <= 4; ++kind)
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(4099)}) {
      INFO(activation_name(kKinds[kind]) << ", " << n << " values");
      const ref::Vec x = random_floats(n, rng, -8.0, 8.0), dy = random_floats(n, rng);
      ref::Vec y(n), dx(n), wrong_y(n), wrong_dx(n);
      for (size_t i = 0; i < n; ++i) {
        const float yf = forward(kind, float(x[i]));
        y[i] = yf;
        dx[i] = backward(kind, yf, float(dy[i]));
        // Deliberately wrong formulas: sigmoid's branches swapped, tanh off by 64 ulps; relu's and
        // relu6's gradient passing at the bounds, sigmoid's without (1 - y), tanh's without the square.
        wrong_y[i] = kind == 3 ? (x[i] >= 0 ? 1.0 - yf : yf) : kind == 4 ? std::tanh(x[i]) * (1 + 64 * kU) : yf;
        const double lo = 0.0, hi = kind == 2 ? 6.0 : INFINITY;
        wrong_dx[i] = kind <= 2 ? (yf >= lo && yf <= hi ? dy[i] : 0.0) : kind == 4 ? dy[i] * (1.0 - yf) : dy[i] * yf;
      }
      const ref::Vec want_y = ref::activation_forward(kind, x), want_dx = ref::activation_backward(kind, x, dy);
      if (n < 7 || kind <= 2) {  // relu's outputs are exact; a wrong relu forward is not a formula here
        check_within("y", y, want_y, 8 * kU);
      } else {
        check_tight("y", y, want_y, 8 * kU, wrong_y);
      }
      if (n < 7) check_within("dx", dx, want_dx, 16 * kU);
      else check_tight("dx", dx, want_dx, 16 * kU, wrong_dx);
    }
}

TEST_CASE("kernel math: activation special values (NaN, infinities, signed zero, large |x|)") {
  const act::Clamp relu = act::clamp_of(ActKind::Relu), relu6 = act::clamp_of(ActKind::Relu6);
  CHECK(std::isnan(act::clamp(NAN, relu)));  // a NaN stays NaN (PyTorch's relu, hardtanh): divergence reaches the loss
  CHECK(std::isnan(act::clamp(NAN, relu6)));
  CHECK(act::through(1.0f, NAN, relu) == 0.0f);  // and passes no gradient (NaN > 0 is false)
  CHECK(act::clamp(INFINITY, relu) == INFINITY);
  CHECK(act::clamp(INFINITY, relu6) == 6.0f);
  CHECK(act::clamp(-INFINITY, relu) == 0.0f);
  CHECK(!std::signbit(act::clamp(-0.0f, relu)));  // -0 is not > 0: the bound, +0
  CHECK(act::through(1.0f, INFINITY, relu) == 0.0f);  // lo < y < hi, strictly
  CHECK(act::through(1.0f, 0.0f, relu) == 0.0f);
  CHECK(act::through(1.0f, 6.0f, relu6) == 0.0f);
  CHECK(act::through(1.0f, 5.999999f, relu6) == 1.0f);
  CHECK(act::through(1.0f, 1e-38f, relu) == 1.0f);
  CHECK(act::sigmoid(INFINITY) == 1.0f);
  CHECK(act::sigmoid(-INFINITY) == 0.0f);
  CHECK(act::sigmoid(0.0f) == 0.5f);
  CHECK(std::isnan(act::sigmoid(NAN)));
  // exp only sees -|x|: no overflow to inf/inf. The negative side is 1 - s, accurate to u
  // absolutely (the tail below u rounds to 0), as the CPU always computed it.
  CHECK(act::sigmoid(100.0f) == 1.0f);
  CHECK(act::sigmoid(-80.0f) == 0.0f);
  CHECK(std::fabs(double(act::sigmoid(-10.0f)) - 1.0 / (1.0 + std::exp(10.0))) <= kU);
  CHECK(act::tanh_of(INFINITY) == 1.0f);
  CHECK(std::isnan(act::tanh_of(NAN)));
  CHECK(act::tanh_grad(1.0f, 3.0f) == 0.0f);
  CHECK(act::sigmoid_grad(1.0f, 3.0f) == 0.0f);
}

// Batch norm's fused activation on the GPU is a compile-time clamp (bn::act_clamp<A>); the CPU's is
// act::clamp with the runtime bounds of the layer's kind. Same values and gradients, bit for bit.
TEST_CASE("kernel math: batch norm's compile-time clamp equals the activation kernel's clamp") {
  std::mt19937_64 rng(402);
  std::vector<float> vs = to_floats(random_floats(2000, rng, -10.0, 10.0));
  for (float v : {0.0f, -0.0f, 6.0f, 5.9999995f, 6.0000005f, INFINITY, -INFINITY, NAN, 1e-45f}) vs.push_back(v);
  int64_t bad = 0;
  for (float v : vs)
    for (float g : {1.0f, -2.5f}) {
      auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; };
      bad += !same(bn::act_clamp<0>(v), v) + !same(bn::act_through<0>(g, v), g);
      bad += !same(bn::act_clamp<1>(v), act::clamp(v, act::clamp_of(ActKind::Relu)));
      bad += !same(bn::act_clamp<2>(v), act::clamp(v, act::clamp_of(ActKind::Relu6)));
      bad += !same(bn::act_through<1>(g, v), act::through(g, v, act::clamp_of(ActKind::Relu)));
      bad += !same(bn::act_through<2>(g, v), act::through(g, v, act::clamp_of(ActKind::Relu6)));
    }
  CHECK(bad == 0);
}

// Keras 3's other activations: each formula as both backends run it (act::with_formula's functors)
// against float64 on [-8, 8] (and exactly at the kinks), with a deliberately wrong variant outside
// the bound. Forward: expf/expm1f/log1pf/tanhf within an ulp or two of outputs <= 8.4: 8u of the
// largest. Backward from x (dy in [-1, 1], derivatives <= 1.8): 16u, except mish's, whose 1 - t²
// (t = tanh(softplus(x)) near 1) carries t²'s rounding, 2u absolute, times x·sigmoid(x) <= 8: 32u.
// leaky_relu's backward is from y, as the kernels take it.
TEST_CASE("kernel math: leaky_relu, elu, selu, softplus, hard_sigmoid, hard_silu and mish match float64") {
  struct Case {
    ActKind kind;
    float alpha;
    double dx_bound;
    double (*wrong_y)(double x, double alpha);
    double (*wrong_dx)(double x, double alpha);  // the derivative, times dy by the caller
  };
  const Case cases[] = {
      // leaky_relu: the slope ignored (relu); its gradient without the slope.
      {ActKind::LeakyRelu, 0.3f, 16 * kU, [](double x, double) { return x > 0 ? x : 0.0; },
       [](double x, double) { return x > 0 ? 1.0 : 0.0; }},
      // elu: alpha ignored (1); its gradient exp(x) without alpha.
      {ActKind::Elu, 0.7f, 16 * kU, [](double x, double) { return x > 0 ? x : std::expm1(x); },
       [](double x, double) { return x > 0 ? 1.0 : std::exp(x); }},
      // selu: without its scale.
      {ActKind::Selu, 0.0f, 16 * kU, [](double x, double) { return x > 0 ? x : 1.67326324 * std::expm1(x); },
       [](double x, double) { return x > 0 ? 1.0 : 1.67326324 * std::exp(x); }},
      // softplus: log1p's correction dropped; its gradient sigmoid(-x).
      {ActKind::Softplus, 0.0f, 16 * kU, [](double x, double) { return std::max(x, 0.0) + std::exp(-std::fabs(x)); },
       [](double x, double) { return 1 / (1 + std::exp(x)); }},
      // hard_sigmoid: Keras 2's clip(0.2x + 0.5, 0, 1), and its 0.2 slope.
      {ActKind::HardSigmoid, 0.0f, 16 * kU, [](double x, double) { return std::min(std::max(0.2 * x + 0.5, 0.0), 1.0); },
       [](double x, double) { return x > -2.5 && x < 2.5 ? 0.2 : 0.0; }},
      // hard_silu: silu's x·sigmoid(x); its gradient without x·h'.
      {ActKind::HardSilu, 0.0f, 16 * kU, [](double x, double) { return x / (1 + std::exp(-x)); },
       [](double x, double) { return std::min(std::max(x + 3, 0.0), 6.0) / 6; }},
      // mish: x·tanh(x); its gradient without the x·sigmoid(x)·(1 - t²) term.
      {ActKind::Mish, 0.0f, 32 * kU, [](double x, double) { return x * std::tanh(x); },
       [](double x, double) { return std::tanh(std::log1p(std::exp(x))); }},
  };
  std::mt19937_64 rng(402);
  for (const Case& c : cases)
    for (size_t n : {size_t(1), size_t(7), size_t(4099)}) {
      const int kind = int(c.kind);
      INFO(activation_name(c.kind) << ", alpha " << c.alpha << ", " << n << " values");
      ref::Vec x = random_floats(n, rng, -8.0, 8.0), dy = random_floats(n, rng);
      if (n == 7) x = {-8.0, -3.0, -1e-30, 0.0, 1e-30, 3.0, 8.0};  // the kinks and the ends
      ref::Vec y(n), dx(n), wrong_y(n), wrong_dx(n);
      act::with_formula(c.kind, c.alpha, [&](auto f) {
        for (size_t i = 0; i < n; ++i) {
          const float yf = f(float(x[i]));
          y[i] = yf;
          dx[i] = f.grad(backward_reads_y(c.kind) ? yf : float(x[i]), float(dy[i]));
          wrong_y[i] = c.wrong_y(x[i], c.alpha);
          wrong_dx[i] = dy[i] * c.wrong_dx(x[i], c.alpha);
        }
      });
      const ref::Vec want_y = ref::activation_forward(kind, x, c.alpha), want_dx = ref::activation_backward(kind, x, dy, c.alpha);
      if (n == 4099) {
        check_tight("y", y, want_y, 8 * kU, wrong_y);
        check_tight("dx", dx, want_dx, c.dx_bound, wrong_dx);
      } else {
        check_within("y", y, want_y, 8 * kU);
        check_within("dx", dx, want_dx, c.dx_bound);
      }
    }
  // NaN stays NaN (a diverged activation reaches the loss), and the extremes stay finite.
  for (const Case& c : cases)
    act::with_formula(c.kind, c.alpha, [&](auto f) {
      INFO(activation_name(c.kind));
      CHECK(std::isnan(f(NAN)));
      CHECK(std::isfinite(f(-1e30f)));
      CHECK(f(1e30f) == (c.kind == ActKind::HardSigmoid ? 1.0f : c.kind == ActKind::Selu ? 1.05070098f * 1e30f : 1e30f));
    });
}
