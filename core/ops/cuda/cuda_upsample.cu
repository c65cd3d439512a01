// CUDA upsample: nearest-neighbour or bilinear upsampling by integer factors and its gradient (a thread per input element summing its outputs in order, in f32), any float type (upsample_math.h's arithmetic, the CPU's).
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/math/upsample_math.h"
#include "core/ops/upsample.h"

namespace trainer {
namespace {

template <class T>
__global__ void upsample_kernel(const T* x, T* y, upsample::Dims d, int64_t n) {
  CUDA_GRID_LOOP(o, n) { y[o] = x[upsample::source(d, o)]; }
}

template <class T>
struct LoadF32 {
  const T* p;
  __device__ float operator()(int64_t i) const { return cuda::to_f32(p[i]); }
};

template <class T>
__global__ void upsample_grad_kernel(const T* dy, T* dx, upsample::Dims d, int64_t n) {
  CUDA_GRID_LOOP(k, n) { dx[k] = cuda::from_f32<T>(upsample::block_sum(d, k, LoadF32<T>{dy})); }
}

template <class T>
__global__ void bilinear_kernel(const T* x, T* y, upsample::Dims d, int64_t n) {
  CUDA_GRID_LOOP(o, n) { y[o] = cuda::from_f32<T>(upsample::bilinear_value(d, o, LoadF32<T>{x})); }
}

template <class T>
__global__ void bilinear_grad_kernel(const T* dy, T* dx, upsample::Dims d, int64_t n) {
  CUDA_GRID_LOOP(k, n) { dx[k] = cuda::from_f32<T>(upsample::bilinear_grad(d, k, LoadF32<T>{dy})); }
}

class CudaUpsample final : public UpsampleKernel {
 public:
  CudaUpsample(OpContext& ctx, const UpsampleParams& p) : UpsampleKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  upsample::Dims dims(const Tensor& x) const { return {x.dim(0), x.dim(1), x.dim(2), x.dim(3), p_.sh, p_.sw}; }

  void forward_impl(const Tensor& x, Tensor& y) override {
    const int64_t n = y.numel();
    if (n == 0) return;
    cuda::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      if (p_.bilinear)
        TRAINER_LAUNCH(bilinear_kernel<T>, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), cuda::ptr<const T>(x),
                       cuda::ptr<T>(y), dims(x), n);
      else
        TRAINER_LAUNCH(upsample_kernel<T>, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), cuda::ptr<const T>(x),
                       cuda::ptr<T>(y), dims(x), n);
    });
  }

  void backward_impl(const Tensor& dy, Tensor& dx) override {
    const int64_t n = dx.numel();
    if (n == 0) return;
    cuda::dispatch_float(kName, "dx", dx, [&](auto tag) {
      using T = decltype(tag);
      if (p_.bilinear)
        TRAINER_LAUNCH(bilinear_grad_kernel<T>, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(),
                       cuda::ptr<const T>(dy), cuda::ptr<T>(dx), dims(dx), n);
      else
        TRAINER_LAUNCH(upsample_grad_kernel<T>, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(),
                       cuda::ptr<const T>(dy), cuda::ptr<T>(dx), dims(dx), n);
    });
  }

  CudaContext& c_;
};

static RegisterKernel<UpsampleKernel, CudaUpsample> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
