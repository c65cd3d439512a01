// CPU rescale: Keras's Rescaling, x·scale + offset per element (one value, or one per channel), f32 or bf16.
#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/rescale.h"

namespace trainer {
namespace {

class CpuRescale final : public RescaleKernel {
 public:
  CpuRescale(OpContext& ctx, const RescaleParams& p) : RescaleKernel(ctx, p) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y) override { run(x, y, true); }
  void backward_impl(const Tensor& dy, Tensor& dx) override { run(dy, dx, false); }

  // out = in·scale + offset (forward), or in·scale (the gradient); may be in place.
  void run(const Tensor& in, Tensor& out, bool forward) const {
    const int64_t n = in.numel(), C = channels();
    const float* s = p_.scale.data();
    const float* o = p_.offset.data();
    cpu::dispatch_float(kName, "x", in, [&](auto tag) {
      using T = decltype(tag);
      const T* ip = in.as<T>();
      T* op = out.as<T>();
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t c = C == 1 ? 0 : i % C;
        const float v = cpu::to_f32(ip[i]);
        op[i] = cpu::from_f32<T>(forward ? rescale_math::forward(v, s[c], o[c]) : v * s[c]);
      }
    });
  }
};

static RegisterKernel<RescaleKernel, CpuRescale> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
