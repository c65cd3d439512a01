// CPU bias_add: a per-channel bias added to f32 or bf16 rows (rounded once), and its gradient as deterministic column sums in double (cpu::column_sums, dense's).
#include "core/ops/bias.h"
#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer {
namespace {

class CpuBias final : public BiasKernel {
 public:
  CpuBias(OpContext& ctx, const BiasParams& p) : BiasKernel(ctx, p) {}

 private:
  void forward_impl(Tensor& y, const Tensor& b) override {
    // (no structured binding: clang 14, the sanitizer builds' compiler, cannot capture one)
    const int64_t C = y.shape().back(), rows = C ? y.numel() / C : 0;
    const float* bp = b.f32();
    cpu::dispatch_float(kName, "y", y, [&](auto tag) {
      using T = decltype(tag);
      T* yp = y.as<T>();
#pragma omp parallel for schedule(static) if (rows * C > cpu::kParallelGrain)
      for (int64_t r = 0; r < rows; ++r) {
        T* row = yp + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) row[c] = cpu::from_f32<T>(cpu::to_f32(row[c]) + bp[c]);
      }
    });
  }

  void backward_impl(const Tensor& dy, Tensor& db) override {
    const int64_t C = dy.shape().back(), rows = C ? dy.numel() / C : 0;
    cpu::column_sums(kName, dy, rows, C, db.f32());
  }
};

static RegisterKernel<BiasKernel, CpuBias> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
