// CUDA pad2d: zero padding of NHWC activations of any float type (one thread per output element, 32-bit index math where it fits) and its backward crop.
#include <cstdint>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/pad2d.h"
#include "core/ops/math/pad_math.h"

namespace trainer {
namespace {

using pad_math::PadShape;

// y element i of [n, oh, ow, c]: x under it, or zero in the border (T's bits copied as they are).
template <class T, class I>
__global__ void pad_forward_kernel(PadShape s, const T* __restrict__ x, T* __restrict__ y, I total) {
  CUDA_GRID_LOOP_T(I, i, total) {
    const I src = pad_math::forward_source(s, i);
    y[i] = src >= 0 ? x[src] : cuda::from_f32<T>(0.0f);
  }
}

// dx element i of [n, h, w, c]: the dy element it was copied to.
template <class T, class I>
__global__ void pad_backward_kernel(PadShape s, const T* __restrict__ dy, T* __restrict__ dx, I total) {
  CUDA_GRID_LOOP_T(I, i, total) dx[i] = dy[pad_math::backward_source(s, i)];
}

class CudaPad2d final : public Pad2dKernel {
 public:
  CudaPad2d(OpContext& ctx, const Pad2dParams& p) : Pad2dKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y) override {
    if (y.numel() == 0) return;
    cuda::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      cuda::with_index_type({x.numel(), y.numel()}, [&](auto index) {
        using I = decltype(index);
        TRAINER_LAUNCH((pad_forward_kernel<T, I>), cuda::grid_for(y.numel(), c_), cuda::kBlock, c_.stream(),
                       shape_of(x.shape()), cuda::ptr<const T>(x), cuda::ptr<T>(y), I(y.numel()));
      });
    });
  }

  void backward_impl(const Tensor& dy, Tensor& dx) override {
    if (dx.numel() == 0) return;
    cuda::dispatch_float(kName, "dx", dx, [&](auto tag) {
      using T = decltype(tag);
      cuda::with_index_type({dy.numel(), dx.numel()}, [&](auto index) {
        using I = decltype(index);
        TRAINER_LAUNCH((pad_backward_kernel<T, I>), cuda::grid_for(dx.numel(), c_), cuda::kBlock, c_.stream(),
                       shape_of(dx.shape()), cuda::ptr<const T>(dy), cuda::ptr<T>(dx), I(dx.numel()));
      });
    });
  }

  PadShape shape_of(const Shape& x) const {
    return {x[0], x[1], x[2], x[3], x[1] + p_.top + p_.bottom, x[2] + p_.left + p_.right, p_.top, p_.left};
  }

  CudaContext& c_;
};

static RegisterKernel<Pad2dKernel, CudaPad2d> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
