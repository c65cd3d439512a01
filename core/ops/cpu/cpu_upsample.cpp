// CPU upsample: nearest-neighbour or bilinear upsampling by integer factors and its gradient (sums in f32, in order), f32 or bf16 (upsample_math.h's arithmetic).
#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/upsample_math.h"
#include "core/ops/upsample.h"

namespace trainer {
namespace {

class CpuUpsample final : public UpsampleKernel {
 public:
  CpuUpsample(OpContext& ctx, const UpsampleParams& p) : UpsampleKernel(ctx, p) {}

 private:
  upsample::Dims dims(const Tensor& x) const { return {x.dim(0), x.dim(1), x.dim(2), x.dim(3), p_.sh, p_.sw}; }

  void forward_impl(const Tensor& x, Tensor& y) override {
    const upsample::Dims d = dims(x);
    const int64_t n = y.numel();
    cpu::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      const T* xp = x.as<T>();
      T* yp = y.as<T>();
      if (p_.bilinear) {
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain / 8)
        for (int64_t o = 0; o < n; ++o)
          yp[o] = cpu::from_f32<T>(upsample::bilinear_value(d, o, [xp](int64_t i) { return cpu::to_f32(xp[i]); }));
        return;
      }
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t o = 0; o < n; ++o) yp[o] = xp[upsample::source(d, o)];  // a copy: no rounding
    });
  }

  void backward_impl(const Tensor& dy, Tensor& dx) override {
    const upsample::Dims d = dims(dx);
    const int64_t n = dx.numel();
    cpu::dispatch_float(kName, "dx", dx, [&](auto tag) {
      using T = decltype(tag);
      const T* g = dy.as<T>();
      T* out = dx.as<T>();
      if (p_.bilinear) {
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain / 32)
        for (int64_t k = 0; k < n; ++k)
          out[k] = cpu::from_f32<T>(upsample::bilinear_grad(d, k, [g](int64_t i) { return cpu::to_f32(g[i]); }));
        return;
      }
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t k = 0; k < n; ++k)
        out[k] = cpu::from_f32<T>(upsample::block_sum(d, k, [g](int64_t i) { return cpu::to_f32(g[i]); }));
    });
  }
};

static RegisterKernel<UpsampleKernel, CpuUpsample> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
