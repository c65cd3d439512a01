// CUDA optimizer updates: fused single-pass SGD, Adam(W) and RMSprop over flat f32 buffers (same formulas as cpu_optim_update.cpp); the gradients' finiteness check.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/optim_update.h"

namespace trainer {
namespace {

// One element per iteration; the per-element arithmetic is the CPU's, written in the same order
// (nvcc may contract a*b + c into an fma, so results agree with the CPU to rounding, not bits).

// v == nullptr: no velocity (momentum 0): w -= lr * g'.
__global__ void sgd_kernel(float* w, const float* g, float* v, int64_t n, float lr, float m, float wd, float sc,
                           bool nesterov) {
  CUDA_GRID_LOOP(i, n) {
    const float gi = g[i] * sc + wd * w[i];
    if (!v) {
      w[i] -= lr * gi;
    } else {
      const float vi = m * v[i] + gi;
      v[i] = vi;
      w[i] -= lr * (nesterov ? gi + m * vi : vi);
    }
  }
}

__global__ void adam_kernel(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2,
                            float eps, float sc, float l2, float dec, float ib1, float ib2) {
  CUDA_GRID_LOOP(i, n) {
    const float w0 = w[i];
    const float gi = g[i] * sc + l2 * w0;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = w0 - dec * w0 - lr * (mi * ib1) / (sqrtf(vi * ib2) + eps);
  }
}

// mom == nullptr: no momentum; mg == nullptr: not centered.
__global__ void rmsprop_kernel(float* w, const float* g, float* ms, float* mom, float* mg, int64_t n, float lr,
                               float rho, float mm, float eps, float wd, float sc) {
  CUDA_GRID_LOOP(i, n) {
    const float gi = g[i] * sc + wd * w[i];
    const float msi = rho * ms[i] + (1.0f - rho) * gi * gi;
    ms[i] = msi;
    float var = msi;
    if (mg) {
      const float mgi = rho * mg[i] + (1.0f - rho) * gi;
      mg[i] = mgi;
      var = fmaxf(msi - mgi * mgi, 0.0f);  // >= 0 in exact arithmetic
    }
    const float step = lr * gi / (sqrtf(var) + eps);
    if (mom) {
      const float mo = mm * mom[i] + step;
      mom[i] = mo;
      w[i] -= mo;
    } else {
      w[i] -= step;
    }
  }
}

// flag = 1 when some element is inf or NaN. Every writer writes the same value, so the answer
// does not depend on the order of threads (no atomics needed); flag is zeroed before the launch.
__global__ void nonfinite_kernel(const float* g, int64_t n, int* flag) {
  bool bad = false;
  CUDA_GRID_LOOP(i, n) bad |= !isfinite(g[i]);
  if (bad) *flag = 1;
}

class CudaOptimUpdate final : public OptimUpdateKernel {
 public:
  CudaOptimUpdate(OpContext& ctx, const OptimUpdateParams&) : c_(cuda_context(ctx)) {}

  void sgd(Tensor& w, const Tensor& g, Tensor& velocity, const SgdStep& s) override {
    check_wg("sgd", w, g);
    // Without a velocity buffer (allowed only when momentum is 0) the update is w -= lr*g'.
    const bool mom = velocity.defined();
    check_state("sgd", "velocity", velocity, w, s.momentum != 0.0f);
    TRAINER_LAUNCH(sgd_kernel, cuda::grid_for(w.numel(), c_), cuda::kBlock, c_.stream(), w.f32(), g.f32(),
                   mom ? velocity.f32() : nullptr, w.numel(), s.lr, s.momentum, s.weight_decay, s.grad_scale,
                   s.nesterov);
  }

  void adam(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) override {
    check_wg("adam", w, g);
    check_state("adam", "m", m, w, true);
    check_state("adam", "v", v, w, true);
    if (!(s.bias1 > 0.0f) || !(s.bias2 > 0.0f)) cuda::fail("adam: bias corrections must be positive (step >= 1)");
    const float l2 = s.decoupled ? 0.0f : s.weight_decay;        // added to the gradient
    const float dec = s.decoupled ? s.lr * s.weight_decay : 0.0f;  // AdamW: w -= lr*wd*w
    const float ib1 = 1.0f / s.bias1, ib2 = 1.0f / s.bias2;
    TRAINER_LAUNCH(adam_kernel, cuda::grid_for(w.numel(), c_), cuda::kBlock, c_.stream(), w.f32(), g.f32(), m.f32(),
                   v.f32(), w.numel(), s.lr, s.beta1, s.beta2, s.epsilon, s.grad_scale, l2, dec, ib1, ib2);
  }

  void rmsprop(Tensor& w, const Tensor& g, Tensor& ms, Tensor& mom, Tensor& mg, const RmspropStep& s) override {
    check_wg("rmsprop", w, g);
    const bool use_mom = s.momentum != 0.0f;
    check_state("rmsprop", "ms", ms, w, true);
    check_state("rmsprop", "mom", mom, w, use_mom);
    check_state("rmsprop", "mg", mg, w, s.centered);
    TRAINER_LAUNCH(rmsprop_kernel, cuda::grid_for(w.numel(), c_), cuda::kBlock, c_.stream(), w.f32(), g.f32(),
                   ms.f32(), use_mom ? mom.f32() : nullptr, s.centered ? mg.f32() : nullptr, w.numel(), s.lr, s.rho,
                   s.momentum, s.epsilon, s.weight_decay, s.grad_scale);
  }

  bool all_finite(const Tensor& g) override {
    cuda::require_f32("all_finite", "g", g, c_.device());
    if (!flag_.defined()) flag_ = Tensor::empty(Shape{1}, DType::I32, c_.allocator());
    c_.fill_zero(flag_.data(), sizeof(int));
    if (g.numel() > 0)
      TRAINER_LAUNCH(nonfinite_kernel, cuda::grid_for(g.numel(), c_), cuda::kBlock, c_.stream(), g.f32(), g.numel(),
                     static_cast<int*>(flag_.data()));
    int bad = 0;
    c_.copy_to_host(&bad, flag_.data(), sizeof(int));  // waits for the stream
    return bad == 0;
  }

 private:
  void check_wg(const char* op, const Tensor& w, const Tensor& g) const {
    cuda::require_f32(op, "w", w, c_.device());
    cuda::require_f32(op, "g", g, c_.device());
    cuda::require_same_numel(op, "g", g, "w", w);
  }
  // State buffers a configuration does not use (SGD without momentum, RMSprop without momentum or
  // centering) may be undefined.
  void check_state(const char* op, const char* name, const Tensor& t, const Tensor& w, bool needed) const {
    if (!needed && !t.defined()) return;
    cuda::require_f32(op, name, t, c_.device());
    cuda::require_same_numel(op, name, t, "w", w);
  }

  CudaContext& c_;
  Tensor flag_;  // all_finite's answer on the device
};

static RegisterKernel<OptimUpdateKernel, CudaOptimUpdate> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
