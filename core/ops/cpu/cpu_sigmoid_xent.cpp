// CPU sigmoid cross-entropy: per-sample loss, hit and gradient under OpenMP, summed afterwards in sample order.
#include <fmt/format.h>

#include <stdexcept>
#include <vector>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/softmax_math.h"
#include "core/ops/sigmoid_xent.h"

namespace trainer {
namespace {

class CpuSigmoidXent final : public SigmoidXentKernel {
 public:
  CpuSigmoidXent(OpContext& ctx, const SigmoidXentParams& p) : SigmoidXentKernel(ctx, p) {}

 private:
  LossStats loss_impl(int64_t N, const Tensor& logits, const Tensor& labels, Tensor& dlogits,
                      float grad_scale) override {
    const bool grad = dlogits.defined();
    const int32_t* z = labels.i32();
    for (int64_t i = 0; i < N; ++i)
      if (z[i] != 0 && z[i] != 1)
        throw std::out_of_range(fmt::format("sigmoid_xent: label {} (sample {}) is not 0 or 1", z[i], i));
    const float* x = logits.f32();
    float* d = grad ? dlogits.f32() : nullptr;
    const float* cw = grad ? class_weight_ : nullptr;  // training's loss only
    std::vector<double> losses(static_cast<size_t>(N));
    std::vector<uint8_t> hits(static_cast<size_t>(N));
#pragma omp parallel for schedule(static) if (N > cpu::kParallelGrain / 8)
    for (int64_t i = 0; i < N; ++i) {
      const float t = sigmoid_xent::smooth(z[i], label_smoothing_);
      const float w = softmax_math::class_weight(cw, z[i]);
      losses[size_t(i)] = cw ? sigmoid_xent::loss(x[i], t) * double(w) : sigmoid_xent::loss(x[i], t);
      hits[size_t(i)] = sigmoid_xent::hit(x[i], z[i]);
      if (d) d[i] = sigmoid_xent::grad(x[i], t, grad_scale * w);
    }
    LossStats s{0.0, 0, N};
    for (int64_t i = 0; i < N; ++i) {
      s.loss_sum += losses[size_t(i)];
      s.correct += hits[size_t(i)];
    }
    return s;
  }
};

static RegisterKernel<SigmoidXentKernel, CpuSigmoidXent> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
