// Kernel math: optim_math.h (the per-element SGD, Adam(W) and RMSprop updates both backends run) against the float64 optimizer references over several steps.
#include "core/ops/math/optim_math.h"

#include "kernel_math_util.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;

namespace {

constexpr int kSteps = 6;

struct State {
  std::vector<float> w, a, b, c;  // weights and up to three state buffers
  ref::Vec rw, ra, rb, rc;
};

State make(size_t n, std::mt19937_64& rng) {
  State s;
  s.rw = random_floats(n, rng);
  s.w = to_floats(s.rw);
  s.a.assign(n, 0.0f), s.b.assign(n, 0.0f), s.c.assign(n, 0.0f);
  s.ra.assign(n, 0.0), s.rb.assign(n, 0.0), s.rc.assign(n, 0.0);
  return s;
}

// Each step rounds a handful of f32 operations on values of order one, and the weights carry the
// previous steps' errors: 8u per step of the largest weight.
constexpr double kTol = 8 * kSteps * kU;

}  // namespace

TEST_CASE("kernel math: sgd updates (plain, momentum, nesterov, weight decay) match float64 over steps") {
  std::mt19937_64 rng(451);
  struct Cfg {
    float momentum, wd;
    bool nesterov;
  };
  for (size_t n : {size_t(1), size_t(7), size_t(10001)})
    for (Cfg c : {Cfg{0.0f, 0.0f, false}, Cfg{0.9f, 0.0f, false}, Cfg{0.9f, 5e-4f, true}, Cfg{0.5f, 1e-2f, false}}) {
      INFO(n << " values, momentum " << c.momentum << ", weight decay " << c.wd << (c.nesterov ? ", nesterov" : ""));
      State s = make(n, rng);
      std::vector<float> wrong = s.w, wrong_v(n, 0.0f);
      const SgdStep st{0.05f, c.momentum, c.wd, 0.5f, c.nesterov};
      const optim_math::SgdCoef k = optim_math::sgd_coef(st);
      for (int step = 0; step < kSteps; ++step) {
        const ref::Vec g = random_floats(n, rng, -2, 2);
        for (size_t i = 0; i < n; ++i) {
          if (c.momentum == 0.0f) optim_math::sgd(s.w[i], float(g[i]), k);
          else optim_math::sgd_momentum(s.w[i], s.a[i], float(g[i]), k, c.nesterov);
          // Wrong: Nesterov's look-ahead the other way round (plain momentum when asked for
          // Nesterov, and the reverse); without momentum, the weight decay left out.
          if (c.momentum == 0.0f) optim_math::sgd(wrong[i], float(g[i]), {k.lr, 0.0f, 0.0f, k.scale});
          else optim_math::sgd_momentum(wrong[i], wrong_v[i], float(g[i]), k, !c.nesterov);
        }
        ref::sgd_step(s.rw, g, s.ra, st.lr, st.momentum, st.weight_decay, st.grad_scale, st.nesterov);
      }
      if (c.momentum == 0.0f && c.wd == 0.0f) check_within("w", to_doubles(s.w), s.rw, kTol);
      else check_tight("w", to_doubles(s.w), s.rw, kTol, to_doubles(wrong));
      if (c.momentum != 0.0f) check_within("velocity", to_doubles(s.a), s.ra, kTol);
    }
}

TEST_CASE("kernel math: adam and adamw updates match float64 over steps") {
  std::mt19937_64 rng(452);
  for (size_t n : {size_t(1), size_t(9), size_t(10001)})
    for (bool decoupled : {false, true}) {
      INFO(n << " values, " << (decoupled ? "adamw" : "adam"));
      State s = make(n, rng);
      std::vector<float> wrong = s.w, wm(n, 0.0f), wv(n, 0.0f);
      for (int step = 1; step <= kSteps; ++step) {
        const float b1 = 0.9f, b2 = 0.999f;
        const AdamStep st{1e-2f, b1, b2, 1e-7f, 1e-2f, 0.5f, decoupled, float(1 - std::pow(double(b1), step)),
                          float(1 - std::pow(double(b2), step))};
        const optim_math::AdamCoef k = optim_math::adam_coef(st);
        optim_math::AdamCoef no_bias = k;  // wrong: no bias correction
        no_bias.ib1 = no_bias.ib2 = 1.0f;
        const ref::Vec g = random_floats(n, rng, -2, 2);
        for (size_t i = 0; i < n; ++i) {
          optim_math::adam(s.w[i], s.a[i], s.b[i], float(g[i]), k);
          optim_math::adam(wrong[i], wm[i], wv[i], float(g[i]), no_bias);
        }
        ref::adam_step(s.rw, g, s.ra, s.rb, st.lr, st.beta1, st.beta2, st.epsilon, st.weight_decay, st.grad_scale,
                       decoupled, step);
      }
      check_tight("w", to_doubles(s.w), s.rw, kTol, to_doubles(wrong));
      check_within("m", to_doubles(s.a), s.ra, kTol);
      check_within("v", to_doubles(s.b), s.rb, kTol);
    }
}

TEST_CASE("kernel math: rmsprop updates (momentum, centered) match float64 over steps") {
  std::mt19937_64 rng(453);
  for (size_t n : {size_t(1), size_t(11), size_t(10001)})
    for (int v = 0; v < 4; ++v) {
      const bool momentum = v & 1, centered = v & 2;
      INFO(n << " values" << (momentum ? ", momentum" : "") << (centered ? ", centered" : ""));
      State s = make(n, rng);
      std::vector<float> wrong = s.w, w1(n, 0.0f), w2(n, 0.0f), w3(n, 0.0f);
      const RmspropStep st{1e-2f, 0.9f, momentum ? 0.5f : 0.0f, 1e-7f, 1e-3f, 0.5f, centered};
      const optim_math::RmspropCoef k = optim_math::rmsprop_coef(st);
      for (int step = 0; step < kSteps; ++step) {
        const ref::Vec g = random_floats(n, rng, -2, 2);
        for (size_t i = 0; i < n; ++i) {
          optim_math::rmsprop(s.w[i], s.a[i], momentum ? &s.b[i] : nullptr, centered ? &s.c[i] : nullptr,
                              float(g[i]), k);
          // Wrong: centering ignored when asked for, and asked for when not.
          optim_math::rmsprop(wrong[i], w1[i], momentum ? &w2[i] : nullptr, centered ? nullptr : &w3[i],
                              float(g[i]), k);
        }
        ref::rmsprop_step(s.rw, g, s.ra, s.rb, s.rc, st.lr, st.rho, st.momentum, st.epsilon, st.weight_decay,
                          st.grad_scale, st.centered);
      }
      check_tight("w", to_doubles(s.w), s.rw, kTol, to_doubles(wrong));
      check_within("ms", to_doubles(s.a), s.ra, kTol);
      if (momentum) check_within("mom", to_doubles(s.b), s.rb, kTol);
      if (centered) check_within("mg", to_doubles(s.c), s.rc, kTol);
    }
}
