// CUDA merge: Keras's Subtract, Average, Maximum and Minimum element by element (merge_math.h, as the CPU), a thread per element, any float type.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/merge.h"

namespace trainer {
namespace {

template <class T>
__global__ void merge_forward_kernel(merge_math::Pointers<T> p, T* y, int64_t total, MergeMode m) {
  CUDA_GRID_LOOP(e, total) y[e] = cuda::from_f32<T>(merge_math::forward(m, p.n, [&](int i) { return cuda::to_f32(p.x[i][e]); }));
}

template <class T>
__global__ void merge_backward_kernel(merge_math::Pointers<T> p, const T* dy, int64_t total, MergeMode m) {
  const bool picks = m == MergeMode::Maximum || m == MergeMode::Minimum;
  CUDA_GRID_LOOP(e, total) {
    const int w = picks ? merge_math::pick(m, p.n, [&](int i) { return cuda::to_f32(p.x[i][e]); }) : 0;
    const float g = cuda::to_f32(dy[e]);
    for (int i = 0; i < p.n; ++i)
      if (p.dx[i]) p.dx[i][e] = cuda::from_f32<T>(merge_math::gradient(m, p.n, i, w, g));
  }
}

class CudaMerge final : public MergeKernel {
 public:
  CudaMerge(OpContext& ctx, const MergeParams& p) : MergeKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const std::vector<const Tensor*>& xs, Tensor& y) override {
    const int64_t total = y.numel();
    if (total == 0) return;
    cuda::dispatch_float(kName, "y", y, [&](auto tag) {
      using T = decltype(tag);
      TRAINER_LAUNCH(merge_forward_kernel<T>, cuda::grid_for(total, c_), cuda::kBlock, c_.stream(), pointers<T>(xs, {}),
                     cuda::ptr<T>(y), total, p_.mode);
    });
  }

  void backward_impl(const std::vector<const Tensor*>& xs, const Tensor& dy, const std::vector<Tensor*>& dxs) override {
    const int64_t total = dy.numel();
    if (total == 0) return;
    cuda::dispatch_float(kName, "dy", dy, [&](auto tag) {
      using T = decltype(tag);
      TRAINER_LAUNCH(merge_backward_kernel<T>, cuda::grid_for(total, c_), cuda::kBlock, c_.stream(), pointers<T>(xs, dxs),
                     cuda::ptr<const T>(dy), total, p_.mode);
    });
  }

  CudaContext& c_;
};

static RegisterKernel<MergeKernel, CudaMerge> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
