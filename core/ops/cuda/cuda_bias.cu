// CUDA bias_add: a per-channel bias added to f32, bf16 or f16 rows (cuda_bias.cuh, conv2d's), and its gradient as deterministic column sums in double (cuda_reduce.cuh).
#include "core/ops/bias.h"
#include "core/ops/cuda/cuda_bias.cuh"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_reduce.cuh"

namespace trainer {
namespace {

class CudaBias final : public BiasKernel {
 public:
  CudaBias(OpContext& ctx, const BiasParams& p) : BiasKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(Tensor& y, const Tensor& b) override {
    const int64_t n = y.numel(), C = y.shape().back();
    if (n == 0) return;
    cuda::dispatch_float(kName, "y", y, [&](auto tag) {
      using T = decltype(tag);
      TRAINER_LAUNCH(cuda::add_bias_kernel<T>, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), cuda::ptr<T>(y),
                     b.f32(), n, C);
    });
  }

  void backward_impl(const Tensor& dy, Tensor& db) override {
    const int64_t C = dy.shape().back(), rows = C ? dy.numel() / C : 0;
    if (C == 0) return;
    if (rows == 0) {
      c_.fill_zero(db.data(), db.bytes());
      return;
    }
    cuda::dispatch_float(kName, "dy", dy, [&](auto tag) {
      using T = decltype(tag);
      cuda::column_sums(sums_, c_, cuda::ptr<const T>(dy), rows, C, db.f32());
    });
  }

  CudaContext& c_;
  cuda::ColumnReducer sums_;
};

static RegisterKernel<BiasKernel, CudaBias> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
