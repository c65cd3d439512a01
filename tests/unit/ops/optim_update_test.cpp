// optim_update tests: SGD, Adam(W) and RMSprop over several steps, at a rate that changes every step, against float64 references of each convention (Keras 3's, PyTorch's).
#include "core/ops/optim_update.h"

#include <cmath>

#include "backends.h"

using namespace trainer;
using namespace trainer::test;

namespace {
constexpr int64_t kLen = 100003;  // odd, larger than the parallel grain
constexpr int kSteps = 6;
constexpr OptimConvention kConventions[] = {OptimConvention::Keras, OptimConvention::PyTorch};
// The rate of step s (0-based): it changes every step, where the two SGD and RMSprop momentum forms differ.
float rate(float lr, int s) { return lr / float(1 + s); }

struct Buffers {
  Tensor w;                   // on the backend
  ref::Vec rw;                // the reference's weights
  std::vector<Tensor> grads;  // on the backend
  std::vector<ref::Vec> rgrads;
};

Buffers make(const Backend& be, std::mt19937_64& rng) {
  Buffers b;
  Tensor w = random_tensor({kLen}, rng);
  b.w = be.upload(w);
  b.rw = to_vec(w);
  for (int s = 0; s < kSteps; ++s) {
    Tensor g = random_tensor({kLen}, rng, -2.0, 2.0);
    b.grads.push_back(be.upload(g));
    b.rgrads.push_back(to_vec(g));
  }
  return b;
}
}  // namespace

TEST_CASE("optim_update sgd matches float64 reference (momentum, nesterov, weight decay)", "[backends]") {
  struct Cfg {
    float momentum, wd;
    bool nesterov;
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(61);
    auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
    for (OptimConvention conv : kConventions)
    for (Cfg c : {Cfg{0.0f, 0.0f, false}, Cfg{0.9f, 0.0f, false}, Cfg{0.9f, 5e-4f, true}, Cfg{0.5f, 1e-2f, false}}) {
      INFO(convention_name(conv) << ": momentum " << c.momentum << ", weight decay " << c.wd
                                 << (c.nesterov ? ", nesterov" : ""));
      Buffers b = make(be, rng);
      Tensor v = be.zeros({kLen});
      ref::Vec rv(kLen, 0.0);
      for (int s = 0; s < kSteps; ++s) {
        SgdStep st{rate(0.05f, s), c.momentum, c.wd, 0.5f, c.nesterov, conv};
        k->sgd(b.w, b.grads[s], v, st);
        ref::sgd_step(b.rw, b.rgrads[s], rv, st.lr, st.momentum, st.weight_decay, st.grad_scale, st.nesterov,
                      conv == OptimConvention::Keras);
      }
      be.check("w", b.w, b.rw);
      be.check("velocity", v, rv);
    }
    // Without momentum the velocity buffer may be absent.
    Buffers b = make(be, rng);
    Tensor none;
    ref::Vec rv(kLen, 0.0);
    k->sgd(b.w, b.grads[0], none, SgdStep{0.1f, 0.0f, 0.0f, 1.0f, false});
    ref::sgd_step(b.rw, b.rgrads[0], rv, 0.1, 0.0, 0.0, 1.0, false, true);
    be.check("w without velocity", b.w, b.rw);
    CHECK_THROWS_AS(k->sgd(b.w, b.grads[0], none, SgdStep{0.1f, 0.9f, 0.0f, 1.0f, false}), std::invalid_argument);
    Tensor short_g = be.zeros({5});
    Tensor v = be.zeros({kLen});
    CHECK_THROWS_AS(k->sgd(b.w, short_g, v, SgdStep{0.1f, 0.9f, 0.0f, 1.0f, false}), std::invalid_argument);
  }
}

TEST_CASE("optim_update adam and adamw match float64 reference", "[backends]") {
  struct Cfg {
    float wd;
    bool decoupled;
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(62);
    auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
    // Keras's weight decay is always decoupled; the kernel also computes L2 with its epsilon hat.
    for (OptimConvention conv : kConventions)
    for (Cfg c : {Cfg{0.0f, false}, Cfg{1e-2f, false}, Cfg{1e-2f, true}}) {
      INFO(convention_name(conv) << ": weight decay " << c.wd << (c.decoupled ? " (decoupled)" : ""));
      Buffers b = make(be, rng);
      Tensor m = be.zeros({kLen}), v = be.zeros({kLen});
      ref::Vec rm(kLen, 0.0), rv(kLen, 0.0);
      const float b1 = 0.9f, b2 = 0.999f;
      for (int t = 1; t <= kSteps; ++t) {
        AdamStep st{rate(1e-3f, t - 1),
                    b1,
                    b2,
                    1e-7f,
                    c.wd,
                    0.5f,
                    c.decoupled,
                    float(1 - std::pow(double(b1), t)),
                    float(1 - std::pow(double(b2), t)),
                    conv};
        k->adam(b.w, b.grads[t - 1], m, v, st);
        ref::adam_step(b.rw, b.rgrads[t - 1], rm, rv, st.lr, b1, b2, st.epsilon, c.wd, st.grad_scale, c.decoupled, t,
                       conv == OptimConvention::Keras);
      }
      be.check("w", b.w, b.rw);
      be.check("m", m, rm);
      be.check("v", v, rv);
    }
  }
}

TEST_CASE("optim_update rmsprop matches float64 reference (centered, momentum)", "[backends]") {
  struct Cfg {
    float momentum, wd;
    bool centered;
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(63);
    auto k = make_kernel<OptimUpdateKernel>(be.ctx(), OptimUpdateParams{});
    for (OptimConvention conv : kConventions)
    for (Cfg c : {Cfg{0.0f, 0.0f, false}, Cfg{0.9f, 0.0f, false}, Cfg{0.0f, 0.0f, true}, Cfg{0.9f, 1e-3f, true}}) {
      INFO(convention_name(conv) << ": momentum " << c.momentum << ", weight decay " << c.wd
                                 << (c.centered ? ", centered" : ""));
      Buffers b = make(be, rng);
      Tensor ms = be.zeros({kLen}), mom = be.zeros({kLen}), mg = be.zeros({kLen});
      ref::Vec rms(kLen, 0.0), rmom(kLen, 0.0), rmg(kLen, 0.0);
      for (int s = 0; s < kSteps; ++s) {
        RmspropStep st{rate(1e-3f, s), 0.9f, c.momentum, 1e-7f, c.wd, 0.5f, c.centered, conv};
        k->rmsprop(b.w, b.grads[s], ms, mom, mg, st);
        ref::rmsprop_step(b.rw, b.rgrads[s], rms, rmom, rmg, st.lr, st.rho, st.momentum, st.epsilon, c.wd,
                          st.grad_scale, c.centered, conv == OptimConvention::Keras);
      }
      be.check("w", b.w, b.rw);
      be.check("ms", ms, rms);
      if (c.momentum != 0) be.check("mom", mom, rmom);
      if (c.centered) be.check("mg", mg, rmg);
    }
    // Unused state buffers may be absent.
    Buffers b = make(be, rng);
    Tensor ms = be.zeros({kLen}), none1, none2;
    REQUIRE_NOTHROW(
        k->rmsprop(b.w, b.grads[0], ms, none1, none2, RmspropStep{1e-3f, 0.9f, 0.0f, 1e-7f, 0.0f, 1.0f, false}));
    CHECK_THROWS_AS(
        k->rmsprop(b.w, b.grads[0], ms, none1, none2, RmspropStep{1e-3f, 0.9f, 0.0f, 1e-7f, 0.0f, 1.0f, true}),
        std::invalid_argument);
  }
}
