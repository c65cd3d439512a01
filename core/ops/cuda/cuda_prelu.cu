// CUDA prelu: Keras's PReLU a thread per element (prelu_math.h, as the CPU), alpha's gradient as deterministic column sums in double over (batch, shared axes) x alpha (cuda_reduce.cuh).
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_reduce.cuh"
#include "core/ops/prelu.h"

namespace trainer {
namespace {

template <class T>
__global__ void prelu_forward_kernel(prelu_math::Index ix, const T* x, const float* alpha, T* y, int64_t total) {
  CUDA_GRID_LOOP(e, total) y[e] = cuda::from_f32<T>(prelu_math::forward(cuda::to_f32(x[e]), alpha[ix.alpha_of(e % ix.sample)]));
}

template <class T>
__global__ void prelu_input_grad_kernel(prelu_math::Index ix, const T* x, const float* alpha, const T* dy, T* dx,
                                        int64_t total) {
  CUDA_GRID_LOOP(e, total) {
    dx[e] = cuda::from_f32<T>(
        prelu_math::input_grad(cuda::to_f32(x[e]), alpha[ix.alpha_of(e % ix.sample)], cuda::to_f32(dy[e])));
  }
}

// Column c of the reduction is alpha's element c, row r a (sample, shared position).
template <class T>
struct AlphaTerm {
  prelu_math::Index ix;
  const T* x;
  const T* dy;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, double (&a)[1]) const {
    const int64_t e = ix.element_of(r, c);
    a[0] += prelu_math::alpha_term(cuda::to_f32(x[e]), cuda::to_f32(dy[e]));
  }
};

class CudaPRelu final : public PReluKernel {
 public:
  CudaPRelu(OpContext& ctx, const PReluParams& p) : PReluKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const prelu_math::Index& ix, const Tensor& x, const Tensor& alpha, Tensor& y) override {
    const int64_t total = x.numel();
    if (total == 0) return;
    cuda::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      TRAINER_LAUNCH(prelu_forward_kernel<T>, cuda::grid_for(total, c_), cuda::kBlock, c_.stream(), ix,
                     cuda::ptr<const T>(x), alpha.f32(), cuda::ptr<T>(y), total);
    });
  }

  void backward_impl(const prelu_math::Index& ix, const Tensor& x, const Tensor& alpha, const Tensor& dy, Tensor& dx,
                     Tensor& dalpha) override {
    const int64_t total = x.numel();
    cuda::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      if (dalpha.defined())  // before dx, which may be dy
        sums_.run<1>(c_, total ? x.dim(0) * ix.per_n : 0, ix.alphas,
                     AlphaTerm<T>{ix, cuda::ptr<const T>(x), cuda::ptr<const T>(dy)}, cuda::StoreF32{dalpha.f32()});
      if (dx.defined() && total > 0)
        TRAINER_LAUNCH(prelu_input_grad_kernel<T>, cuda::grid_for(total, c_), cuda::kBlock, c_.stream(), ix,
                       cuda::ptr<const T>(x), alpha.f32(), cuda::ptr<const T>(dy), cuda::ptr<T>(dx), total);
    });
  }

  CudaContext& c_;
  cuda::ColumnReducer sums_;
};

static RegisterKernel<PReluKernel, CudaPRelu> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
