// CPU multiply: y = a·b with b broadcast over a's positions, and its gradients (db summed over the positions in order, in double), f32 or bf16.
#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/multiply.h"

namespace trainer {
namespace {

class CpuMultiply final : public MultiplyKernel {
 public:
  CpuMultiply(OpContext& ctx, const MultiplyParams& p) : MultiplyKernel(ctx, p) {}

 private:
  void forward_impl(const Tensor& a, const Tensor& b, Tensor& y) override {
    const int64_t N = a.dim(0), P = a.dim(1), C = a.dim(2);
    cpu::dispatch_float(kName, "a", a, [&](auto tag) {
      using T = decltype(tag);
      const T* ap = a.as<T>();
      const T* bp = b.as<T>();
      T* yp = y.as<T>();  // may be a: each element is read before it is written
#pragma omp parallel for schedule(static) if (N * P * C > cpu::kParallelGrain)
      for (int64_t r = 0; r < N * P; ++r) {
        const T* g = bp + (r / P) * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yp[r * C + c] = cpu::from_f32<T>(cpu::to_f32(ap[r * C + c]) * cpu::to_f32(g[c]));
      }
    });
  }

  void backward_impl(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) override {
    const int64_t N = a.dim(0), P = a.dim(1), C = a.dim(2);
    cpu::dispatch_float(kName, "a", a, [&](auto tag) {
      using T = decltype(tag);
      const T* ap = a.as<T>();
      const T* bp = b.as<T>();
      const T* gp = dy.as<T>();
      if (db.defined()) {  // before da, which may be dy's buffer
        T* dbp = db.as<T>();
#pragma omp parallel for schedule(static) if (N * P * C > cpu::kParallelGrain)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < C; ++c) {
            double s = 0;
            for (int64_t p = 0; p < P; ++p) {
              const int64_t i = (n * P + p) * C + c;
              s += double(cpu::to_f32(gp[i])) * double(cpu::to_f32(ap[i]));
            }
            dbp[n * C + c] = cpu::from_f32<T>(float(s));
          }
      }
      if (da.defined()) {
        T* dap = da.as<T>();
#pragma omp parallel for schedule(static) if (N * P * C > cpu::kParallelGrain)
        for (int64_t r = 0; r < N * P; ++r) {
          const T* g = bp + (r / P) * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c)
            dap[r * C + c] = cpu::from_f32<T>(cpu::to_f32(gp[r * C + c]) * cpu::to_f32(g[c]));
        }
      }
    });
  }
};

static RegisterKernel<MultiplyKernel, CpuMultiply> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
