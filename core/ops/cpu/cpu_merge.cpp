// CPU merge: Keras's Subtract, Average, Maximum and Minimum element by element (merge_math.h), f32 or bf16.
#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/merge.h"

namespace trainer {
namespace {

class CpuMerge final : public MergeKernel {
 public:
  CpuMerge(OpContext& ctx, const MergeParams& p) : MergeKernel(ctx, p) {}

 private:
  void forward_impl(const std::vector<const Tensor*>& xs, Tensor& y) override {
    cpu::dispatch_float(kName, "y", y, [&](auto tag) {
      using T = decltype(tag);
      const merge_math::Pointers<T> p = pointers<T>(xs, {});
      T* yp = y.as<T>();
      const MergeMode m = p_.mode;
      const int64_t total = y.numel();
#pragma omp parallel for schedule(static) if (total * p.n > cpu::kParallelGrain)
      for (int64_t e = 0; e < total; ++e)
        yp[e] = cpu::from_f32<T>(merge_math::forward(m, p.n, [&](int i) { return cpu::to_f32(p.x[i][e]); }));
    });
  }

  void backward_impl(const std::vector<const Tensor*>& xs, const Tensor& dy, const std::vector<Tensor*>& dxs) override {
    cpu::dispatch_float(kName, "dy", dy, [&](auto tag) {
      using T = decltype(tag);
      const merge_math::Pointers<T> p = pointers<T>(xs, dxs);
      const T* gp = dy.as<T>();
      const MergeMode m = p_.mode;
      const bool picks = m == MergeMode::Maximum || m == MergeMode::Minimum;
      const int64_t total = dy.numel();
#pragma omp parallel for schedule(static) if (total * p.n > cpu::kParallelGrain)
      for (int64_t e = 0; e < total; ++e) {
        const int w = picks ? merge_math::pick(m, p.n, [&](int i) { return cpu::to_f32(p.x[i][e]); }) : 0;
        const float g = cpu::to_f32(gp[e]);
        for (int i = 0; i < p.n; ++i)
          if (p.dx[i]) p.dx[i][e] = cpu::from_f32<T>(merge_math::gradient(m, p.n, i, w, g));
      }
    });
  }
};

static RegisterKernel<MergeKernel, CpuMerge> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
