// CUDA sigmoid cross-entropy: per-sample loss, hit and gradient (one thread each), then the one-block fixed-order sum of cuda_loss_sums.
#include <climits>
#include <stdexcept>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_loss_sums.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/math/softmax_math.h"
#include "core/ops/sigmoid_xent.h"

namespace trainer {
namespace {

// status[i]: 1 hit, 0 miss, -1 label neither 0 nor 1 (no loss; d[i] = 0). `step` (device
// memory, may be null): the scale is step->loss_scale instead, read here. cw: the class weights
// [2] or nullptr (softmax_math::class_weight).
__global__ void bce_samples_kernel(const float* __restrict__ x, const int32_t* __restrict__ z, float* __restrict__ d,
                                   float scale0, const StepScalars* step, float ls, const float* __restrict__ cw,
                                   int64_t N, double* __restrict__ losses, int32_t* __restrict__ status) {
  const float scale = step ? step->loss_scale : scale0;
  CUDA_GRID_LOOP(i, N) {
    const int32_t lab = z[i];
    if (lab != 0 && lab != 1) {
      losses[i] = 0.0;
      status[i] = -1;
      if (d) d[i] = 0.0f;
      continue;
    }
    const float t = sigmoid_xent::smooth(lab, ls);
    const float w = softmax_math::class_weight(cw, lab);
    losses[i] = cw ? sigmoid_xent::loss(x[i], t) * double(w) : sigmoid_xent::loss(x[i], t);
    status[i] = sigmoid_xent::hit(x[i], lab) ? 1 : 0;
    if (d) d[i] = sigmoid_xent::grad(x[i], t, scale * w);
  }
}

class CudaSigmoidXent final : public SigmoidXentKernel {
 public:
  CudaSigmoidXent(OpContext& ctx, const SigmoidXentParams& p) : SigmoidXentKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  // Synchronises the stream (the sums are copied back), and reports a bad label from here.
  LossStats loss_impl(int64_t N, const Tensor& logits, const Tensor& labels, Tensor& dlogits,
                      float grad_scale) override {
    if (N == 0) return {0.0, 0, 0};
    const cuda::LossScratch sc = cuda::loss_scratch(scratch_, c_, N);
    double* losses = sc.losses;
    int32_t* status = sc.status;
    LossSums* res = sc.sums;
    samples(N, logits, labels, dlogits, grad_scale, nullptr, losses, status);
    cuda::launch_loss_sums(c_.stream(), losses, status, labels.i32(), N, res, true);
    LossSums host;
    c_.copy_to_host(&host, res, sizeof host);  // synchronises
    if (host.bad_sample >= 0)
      throw std::out_of_range(cuda::cat("sigmoid_xent: label ", host.bad_label, " (sample ", host.bad_sample, ") is not 0 or 1"));
    return {host.loss_sum, int64_t(host.correct), N};
  }

  // A recorded step's: no copy to the host, the statistics added to `sums` on the device.
  void loss_into_impl(int64_t N, const Tensor& logits, const Tensor& labels, Tensor& dlogits, const StepScalars* step,
                      LossSums* sums) override {
    if (N == 0) return;
    const cuda::LossScratch sc = cuda::loss_scratch(scratch_, c_, N);
    double* losses = sc.losses;
    int32_t* status = sc.status;
    samples(N, logits, labels, dlogits, 1.0f, step, losses, status);
    cuda::launch_loss_sums(c_.stream(), losses, status, labels.i32(), N, sums, false);
  }

  void samples(int64_t N, const Tensor& logits, const Tensor& labels, Tensor& dlogits, float scale,
               const StepScalars* step, double* losses, int32_t* status) {
    TRAINER_LAUNCH(bce_samples_kernel, cuda::grid_for(N, c_), cuda::kBlock, c_.stream(), logits.f32(), labels.i32(),
                   dlogits.defined() ? dlogits.f32() : nullptr, scale, step, label_smoothing_,
                   dlogits.defined() ? class_weight_ : nullptr, N, losses, status);
  }


  CudaContext& c_;
  Scratch scratch_;  // per-sample losses and statuses, then the result
};

static RegisterKernel<SigmoidXentKernel, CudaSigmoidXent> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
