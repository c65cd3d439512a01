// CPU optimizer updates: fused single-pass SGD, Adam(W) and RMSprop over flat f32 buffers; the gradients' finiteness check.
#include <cmath>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/optim_update.h"

namespace trainer {
namespace {

// State buffers a configuration does not use (SGD without momentum, RMSprop without momentum or
// centering) may be undefined.
void check_state(const char* op, const char* name, const Tensor& t, const Tensor& w, bool needed) {
  if (!needed && !t.defined()) return;
  cpu::require_f32(op, name, t);
  cpu::require_same_numel(op, name, t, "w", w);
}

class CpuOptimUpdate final : public OptimUpdateKernel {
 public:
  CpuOptimUpdate(OpContext&, const OptimUpdateParams&) {}

  void sgd(Tensor& w, const Tensor& g, Tensor& velocity, const SgdStep& s) override {
    check_wg("sgd", w, g);
    // Without a velocity buffer (allowed only when momentum is 0) the update is w -= lr*g'.
    const bool mom = velocity.defined();
    check_state("sgd", "velocity", velocity, w, s.momentum != 0.0f);
    float* __restrict wp = w.f32();
    const float* __restrict gp = g.f32();
    int64_t n = w.numel();
    const float lr = s.lr, m = s.momentum, wd = s.weight_decay, sc = s.grad_scale;
    if (!mom) {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        float gi = gp[i] * sc + wd * wp[i];
        wp[i] -= lr * gi;
      }
      return;
    }
    float* __restrict vp = velocity.f32();
    if (s.nesterov) {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        float gi = gp[i] * sc + wd * wp[i];
        float v = m * vp[i] + gi;
        vp[i] = v;
        wp[i] -= lr * (gi + m * v);
      }
    } else {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        float gi = gp[i] * sc + wd * wp[i];
        float v = m * vp[i] + gi;
        vp[i] = v;
        wp[i] -= lr * v;
      }
    }
  }

  void adam(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) override {
    check_wg("adam", w, g);
    check_state("adam", "m", m, w, true);
    check_state("adam", "v", v, w, true);
    if (!(s.bias1 > 0.0f) || !(s.bias2 > 0.0f)) cpu::fail("adam: bias corrections must be positive (step >= 1)");
    float* __restrict wp = w.f32();
    const float* __restrict gp = g.f32();
    float* __restrict mp = m.f32();
    float* __restrict vp = v.f32();
    int64_t n = w.numel();
    const float lr = s.lr, b1 = s.beta1, b2 = s.beta2, eps = s.epsilon, sc = s.grad_scale;
    const float l2 = s.decoupled ? 0.0f : s.weight_decay;        // added to the gradient
    const float dec = s.decoupled ? lr * s.weight_decay : 0.0f;  // AdamW: w -= lr*wd*w
    const float ib1 = 1.0f / s.bias1, ib2 = 1.0f / s.bias2;
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      float w0 = wp[i];
      float gi = gp[i] * sc + l2 * w0;
      float mi = b1 * mp[i] + (1.0f - b1) * gi;
      float vi = b2 * vp[i] + (1.0f - b2) * gi * gi;
      mp[i] = mi;
      vp[i] = vi;
      wp[i] = w0 - dec * w0 - lr * (mi * ib1) / (std::sqrt(vi * ib2) + eps);
    }
  }

  void rmsprop(Tensor& w, const Tensor& g, Tensor& ms, Tensor& mom, Tensor& mg, const RmspropStep& s) override {
    check_wg("rmsprop", w, g);
    const bool use_mom = s.momentum != 0.0f;
    check_state("rmsprop", "ms", ms, w, true);
    check_state("rmsprop", "mom", mom, w, use_mom);
    check_state("rmsprop", "mg", mg, w, s.centered);
    float* __restrict wp = w.f32();
    const float* __restrict gp = g.f32();
    float* __restrict sp = ms.f32();
    float* __restrict op = use_mom ? mom.f32() : nullptr;
    float* __restrict cp = s.centered ? mg.f32() : nullptr;
    int64_t n = w.numel();
    const float lr = s.lr, rho = s.rho, mm = s.momentum, eps = s.epsilon, wd = s.weight_decay, sc = s.grad_scale;
    const bool centered = s.centered;
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      float gi = gp[i] * sc + wd * wp[i];
      float msi = rho * sp[i] + (1.0f - rho) * gi * gi;
      sp[i] = msi;
      float var = msi;
      if (centered) {
        float mgi = rho * cp[i] + (1.0f - rho) * gi;
        cp[i] = mgi;
        var = std::fmax(msi - mgi * mgi, 0.0f);  // >= 0 in exact arithmetic
      }
      float step = lr * gi / (std::sqrt(var) + eps);
      if (use_mom) {
        float mo = mm * op[i] + step;
        op[i] = mo;
        wp[i] -= mo;
      } else {
        wp[i] -= step;
      }
    }
  }

  bool all_finite(const Tensor& g) override {
    cpu::require_f32("all_finite", "g", g);
    const float* __restrict gp = g.f32();
    const int64_t n = g.numel();
    // x - x is 0 for a finite x and NaN for inf or NaN: no branch, vectorises; any NaN in the sum
    // makes it NaN (an order-independent answer).
    float bad = 0.0f;
#pragma omp parallel for simd schedule(static) reduction(+ : bad) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) bad += gp[i] - gp[i];
    return bad == 0.0f;
  }

 private:
  static void check_wg(const char* op, const Tensor& w, const Tensor& g) {
    cpu::require_f32(op, "w", w);
    cpu::require_f32(op, "g", g);
    cpu::require_same_numel(op, "g", g, "w", w);
  }
};

static RegisterKernel<OptimUpdateKernel, CpuOptimUpdate> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
