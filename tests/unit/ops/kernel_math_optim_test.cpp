// Kernel math: optim_math.h (the per-element SGD, Adam(W) and RMSprop updates both backends run), under each convention (Keras 3's, PyTorch's), against the float64 optimizer references over several steps at a changing rate.
#include "core/ops/math/optim_math.h"

#include "kernel_math_util.h"

using namespace trainer;
using namespace trainer::test;
using namespace trainer::test::kmath;

namespace {

constexpr int kSteps = 6;
constexpr OptimConvention kConventions[] = {OptimConvention::Keras, OptimConvention::PyTorch};
OptimConvention other(OptimConvention c) {
  return c == OptimConvention::Keras ? OptimConvention::PyTorch : OptimConvention::Keras;
}
// The rate of step s (0-based): it changes every step, where the conventions' momentum forms differ.
float rate(float lr, int s) { return lr / float(1 + s); }

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

// A second run of an update with a wrong formula: its weights and state.
struct Wrong {
  std::vector<float> w, a, b, c;
  explicit Wrong(const State& s) : w(s.w), a(s.w.size(), 0.0f), b(s.w.size(), 0.0f), c(s.w.size(), 0.0f) {}
};

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
    for (OptimConvention conv : kConventions)
      for (Cfg c : {Cfg{0.0f, 0.0f, false}, Cfg{0.0f, 1e-1f, false}, Cfg{0.9f, 0.0f, false}, Cfg{0.9f, 5e-4f, true},
                    Cfg{0.5f, 1e-2f, false}}) {
        INFO(n << " values, " << convention_name(conv) << ", momentum " << c.momentum << ", weight decay " << c.wd
               << (c.nesterov ? ", nesterov" : ""));
        State s = make(n, rng);
        Wrong flip(s), conv2(s);  // Nesterov the other way round; the other convention
        for (int step = 0; step < kSteps; ++step) {
          const SgdStep st{rate(0.05f, step), c.momentum, c.wd, 0.5f, c.nesterov, conv};
          const optim_math::SgdCoef k = optim_math::sgd_coef(st);
          SgdStep st2 = st;
          st2.convention = other(conv);
          const optim_math::SgdCoef k2 = optim_math::sgd_coef(st2);
          const ref::Vec g = random_floats(n, rng, -2, 2);
          for (size_t i = 0; i < n; ++i) {
            const float gi = float(g[i]);
            if (c.momentum == 0.0f) {
              optim_math::sgd(s.w[i], gi, k);
              optim_math::sgd(flip.w[i], gi, {k.lr, 0.0f, 0.0f, k.scale, k.keras});  // weight decay left out
              optim_math::sgd(conv2.w[i], gi, k2);
            } else {
              optim_math::sgd_momentum(s.w[i], s.a[i], gi, k, c.nesterov);
              optim_math::sgd_momentum(flip.w[i], flip.a[i], gi, k, !c.nesterov);
              optim_math::sgd_momentum(conv2.w[i], conv2.a[i], gi, k2, c.nesterov);
            }
          }
          ref::sgd_step(s.rw, g, s.ra, st.lr, st.momentum, st.weight_decay, st.grad_scale, st.nesterov,
                        conv == OptimConvention::Keras);
        }
        // Without momentum the conventions agree (decoupled decay and L2 are one update there).
        if (c.momentum == 0.0f && c.wd == 0.0f) check_within("w", to_doubles(s.w), s.rw, kTol);
        else check_tight("w", to_doubles(s.w), s.rw, kTol, to_doubles(flip.w));
        if (c.momentum != 0.0f)
          check_tight("w (the other convention wrong)", to_doubles(s.w), s.rw, kTol, to_doubles(conv2.w));
        if (c.momentum != 0.0f) check_within("velocity", to_doubles(s.a), s.ra, kTol);
      }
}

TEST_CASE("kernel math: adam and adamw updates match float64 over steps") {
  std::mt19937_64 rng(452);
  // epsilon 1e-3: large enough that where it is added (epsilon hat or not) shows above the bound.
  for (size_t n : {size_t(1), size_t(9), size_t(10001)})
    for (OptimConvention conv : kConventions)
      for (bool decoupled : {false, true}) {
        INFO(n << " values, " << convention_name(conv) << (decoupled ? ", decoupled" : ", L2") << " weight decay");
        State s = make(n, rng);
        Wrong no_bias(s), conv2(s);
        for (int step = 1; step <= kSteps; ++step) {
          const float b1 = 0.9f, b2 = 0.999f;
          const AdamStep st{rate(1e-2f, step - 1), b1, b2, 1e-3f, 1e-2f, 0.5f, decoupled,
                            float(1 - std::pow(double(b1), step)), float(1 - std::pow(double(b2), step)), conv};
          const optim_math::AdamCoef k = optim_math::adam_coef(st);
          optim_math::AdamCoef nb = k;  // wrong: no bias correction
          nb.ib1 = nb.ib2 = 1.0f;
          nb.alpha = nb.lr;
          AdamStep st2 = st;
          st2.convention = other(conv);
          const optim_math::AdamCoef k2 = optim_math::adam_coef(st2);
          const ref::Vec g = random_floats(n, rng, -2, 2);
          for (size_t i = 0; i < n; ++i) {
            optim_math::adam(s.w[i], s.a[i], s.b[i], float(g[i]), k);
            optim_math::adam(no_bias.w[i], no_bias.a[i], no_bias.b[i], float(g[i]), nb);
            optim_math::adam(conv2.w[i], conv2.a[i], conv2.b[i], float(g[i]), k2);
          }
          ref::adam_step(s.rw, g, s.ra, s.rb, st.lr, st.beta1, st.beta2, st.epsilon, st.weight_decay, st.grad_scale,
                         decoupled, step, conv == OptimConvention::Keras);
        }
        check_tight("w", to_doubles(s.w), s.rw, kTol, to_doubles(no_bias.w));
        check_tight("w (the other convention wrong)", to_doubles(s.w), s.rw, kTol, to_doubles(conv2.w));
        check_within("m", to_doubles(s.a), s.ra, kTol);
        check_within("v", to_doubles(s.b), s.rb, kTol);
      }
}

TEST_CASE("kernel math: adam's per-step coefficients read from StepScalars are adam_coef's bits") {
  for (OptimConvention conv : kConventions)
    for (int t : {1, 2, 7, 1000}) {
      const float b1 = 0.9f, b2 = 0.999f, lr = 3e-3f / float(t);
      const float bias1 = float(1 - std::pow(double(b1), t)), bias2 = float(1 - std::pow(double(b2), t));
      const AdamStep st{lr, b1, b2, 1e-7f, 4e-3f, 0.25f, true, bias1, bias2, conv};
      StepScalars sc;
      sc.lr = lr, sc.grad_scale = 0.25f, sc.bias1 = bias1, sc.bias2 = bias2;
      AdamStep zero = st;
      zero.lr = zero.grad_scale = 0.0f, zero.bias1 = zero.bias2 = 1.0f;
      const optim_math::AdamCoef a = optim_math::adam_coef(st), b = optim_math::with_step(optim_math::adam_coef(zero), &sc);
      INFO(convention_name(conv) << ", step " << t);
      CHECK(a.alpha == b.alpha);
      CHECK(a.ib1 == b.ib1);
      CHECK(a.ib2 == b.ib2);
      CHECK(a.lr == b.lr);
    }
}

TEST_CASE("kernel math: rmsprop updates (momentum, centered, weight decay) match float64 over steps") {
  std::mt19937_64 rng(453);
  // epsilon 1e-2: large enough that inside or outside the root shows above the bound.
  for (size_t n : {size_t(1), size_t(11), size_t(10001)})
    for (OptimConvention conv : kConventions)
      for (int v = 0; v < 4; ++v) {
        const bool momentum = v & 1, centered = v & 2;
        INFO(n << " values, " << convention_name(conv) << (momentum ? ", momentum" : "") << (centered ? ", centered" : ""));
        State s = make(n, rng);
        Wrong flip(s), conv2(s);
        for (int step = 0; step < kSteps; ++step) {
          const RmspropStep st{rate(1e-2f, step), 0.9f, momentum ? 0.5f : 0.0f, 1e-2f, 1e-3f, 0.5f, centered, conv};
          const optim_math::RmspropCoef k = optim_math::rmsprop_coef(st);
          RmspropStep st2 = st;
          st2.convention = other(conv);
          const optim_math::RmspropCoef k2 = optim_math::rmsprop_coef(st2);
          const ref::Vec g = random_floats(n, rng, -2, 2);
          for (size_t i = 0; i < n; ++i) {
            const float gi = float(g[i]);
            optim_math::rmsprop(s.w[i], s.a[i], momentum ? &s.b[i] : nullptr, centered ? &s.c[i] : nullptr, gi, k);
            // Wrong: centering ignored when asked for, and asked for when not.
            optim_math::rmsprop(flip.w[i], flip.a[i], momentum ? &flip.b[i] : nullptr, centered ? nullptr : &flip.c[i],
                                gi, k);
            optim_math::rmsprop(conv2.w[i], conv2.a[i], momentum ? &conv2.b[i] : nullptr,
                                centered ? &conv2.c[i] : nullptr, gi, k2);
          }
          ref::rmsprop_step(s.rw, g, s.ra, s.rb, s.rc, st.lr, st.rho, st.momentum, st.epsilon, st.weight_decay,
                            st.grad_scale, st.centered, conv == OptimConvention::Keras);
        }
        check_tight("w", to_doubles(s.w), s.rw, kTol, to_doubles(flip.w));
        check_tight("w (the other convention wrong)", to_doubles(s.w), s.rw, kTol, to_doubles(conv2.w));
        check_within("ms", to_doubles(s.a), s.ra, kTol);
        if (momentum) check_within("mom", to_doubles(s.b), s.rb, kTol);
        if (centered) check_within("mg", to_doubles(s.c), s.rc, kTol);
      }
}
