// CUDA optimizer updates: fused single-pass SGD, Adam(W) and RMSprop over flat f32 buffers (optim_math.h, shared with the CPU); the gradients' finiteness check.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/optim_math.h"
#include "core/ops/optim_update.h"

namespace trainer {
namespace {

// One element per iteration: optim_math.h's updates, the CPU's (nvcc may contract a*b + c into an
// fma, so results agree with the CPU to rounding, not bits).

// v == nullptr: no velocity (momentum 0): w -= lr * g'.
__global__ void sgd_kernel(float* w, const float* g, float* v, int64_t n, optim_math::SgdCoef k, bool nesterov) {
  CUDA_GRID_LOOP(i, n) {
    if (!v) optim_math::sgd(w[i], g[i], k);
    else optim_math::sgd_momentum(w[i], v[i], g[i], k, nesterov);
  }
}

__global__ void adam_kernel(float* w, const float* g, float* m, float* v, int64_t n, optim_math::AdamCoef k) {
  CUDA_GRID_LOOP(i, n) optim_math::adam(w[i], m[i], v[i], g[i], k);
}

// mom == nullptr: no momentum; mg == nullptr: not centered.
__global__ void rmsprop_kernel(float* w, const float* g, float* ms, float* mom, float* mg, int64_t n,
                               optim_math::RmspropCoef k) {
  CUDA_GRID_LOOP(i, n) optim_math::rmsprop(w[i], ms[i], mom ? mom + i : nullptr, mg ? mg + i : nullptr, g[i], k);
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
                   mom ? velocity.f32() : nullptr, w.numel(), optim_math::sgd_coef(s), s.nesterov);
  }

  void adam(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) override {
    check_wg("adam", w, g);
    check_state("adam", "m", m, w, true);
    check_state("adam", "v", v, w, true);
    if (!(s.bias1 > 0.0f) || !(s.bias2 > 0.0f)) cuda::fail("adam: bias corrections must be positive (step >= 1)");
    TRAINER_LAUNCH(adam_kernel, cuda::grid_for(w.numel(), c_), cuda::kBlock, c_.stream(), w.f32(), g.f32(), m.f32(),
                   v.f32(), w.numel(), optim_math::adam_coef(s));
  }

  void rmsprop(Tensor& w, const Tensor& g, Tensor& ms, Tensor& mom, Tensor& mg, const RmspropStep& s) override {
    check_wg("rmsprop", w, g);
    const bool use_mom = s.momentum != 0.0f;
    check_state("rmsprop", "ms", ms, w, true);
    check_state("rmsprop", "mom", mom, w, use_mom);
    check_state("rmsprop", "mg", mg, w, s.centered);
    TRAINER_LAUNCH(rmsprop_kernel, cuda::grid_for(w.numel(), c_), cuda::kBlock, c_.stream(), w.f32(), g.f32(),
                   ms.f32(), use_mom ? mom.f32() : nullptr, s.centered ? mg.f32() : nullptr, w.numel(),
                   optim_math::rmsprop_coef(s));
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
