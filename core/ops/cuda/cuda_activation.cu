// CUDA activation: linear, relu, relu6, sigmoid and tanh forward/backward as element-wise maps over any float type (cpu_activation.cpp's formulas).
#include "core/ops/activation.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"

namespace trainer {
namespace {

// Forward maps y = f(x), in float (bf16/f16 loaded and rounded once by cuda::tmap1). ReLU and ReLU6
// are clamps written as cpu_clamp.h's (a NaN becomes 0), as the batch-norm kernel's fused ones.
struct ReluF {
  __device__ float operator()(float a) const { return a > 0.0f ? a : 0.0f; }
};
struct Relu6F {
  __device__ float operator()(float a) const { return a > 0.0f ? (a < 6.0f ? a : 6.0f) : 0.0f; }
};
struct SigmoidF {  // exp never overflows: it only sees -|x|
  __device__ float operator()(float a) const {
    float e = expf(-fabsf(a));
    float s = 1.0f / (1.0f + e);
    return a >= 0.0f ? s : 1.0f - s;
  }
};
struct TanhF {
  __device__ float operator()(float a) const { return tanhf(a); }
};

// Backward maps dx = f(v, dy), v being y (every nonlinear kind: backward_reads_y).
struct ReluB {  // the derivative at 0 is taken as 0 (as TF and PyTorch)
  __device__ float operator()(float v, float g) const { return v > 0.0f ? g : 0.0f; }
};
struct Relu6B {
  __device__ float operator()(float v, float g) const { return (v > 0.0f && v < 6.0f) ? g : 0.0f; }
};
struct SigmoidB {
  __device__ float operator()(float v, float g) const { return g * v * (1.0f - v); }
};
struct TanhB {
  __device__ float operator()(float v, float g) const { return g * (1.0f - v * v); }
};

class CudaActivation final : public ActivationKernel {
 public:
  CudaActivation(OpContext& ctx, const ActivationParams& p) : c_(cuda_context(ctx)), p_(p) {}

  void forward(const Tensor& x, Tensor& y) override {
    const Device dev = c_.device();
    cuda::require_float("activation", "x", x, dev);
    cuda::require_as("activation", "y", y, x, x.shape(), dev);
    const int64_t n = x.numel();
    if (p_.kind == ActKind::Linear) {
      if (y.data() != x.data()) c_.copy(y.data(), x.data(), x.bytes());
      return;
    }
    cuda::dispatch_float("activation", "x", x, [&](auto tag) {
      using T = decltype(tag);
      const T* a = cuda::ptr<const T>(x);  // y may alias x
      T* o = cuda::ptr<T>(y);
      switch (p_.kind) {
        case ActKind::Relu: cuda::tmap1(c_, a, o, n, ReluF{}); break;
        case ActKind::Relu6: cuda::tmap1(c_, a, o, n, Relu6F{}); break;
        case ActKind::Sigmoid: cuda::tmap1(c_, a, o, n, SigmoidF{}); break;
        case ActKind::Tanh: cuda::tmap1(c_, a, o, n, TanhF{}); break;
        case ActKind::Linear: break;
      }
    });
  }

  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    const Device dev = c_.device();
    const bool uses_y = backward_reads_y(p_.kind);
    const Tensor& in = uses_y ? y : x;
    cuda::require_float("activation", uses_y ? "y" : "x", in, dev);
    cuda::require_as("activation", "dy", dy, in, in.shape(), dev);
    cuda::require_as("activation", "dx", dx, in, in.shape(), dev);
    const int64_t n = in.numel();
    if (p_.kind == ActKind::Linear) {
      if (dx.data() != dy.data()) c_.copy(dx.data(), dy.data(), dy.bytes());
      return;
    }
    cuda::dispatch_float("activation", "dy", dy, [&](auto tag) {
      using T = decltype(tag);
      const T* v = cuda::ptr<const T>(in);  // dx may alias dy
      const T* g = cuda::ptr<const T>(dy);
      T* o = cuda::ptr<T>(dx);
      switch (p_.kind) {
        case ActKind::Relu: cuda::tmap2(c_, v, g, o, n, ReluB{}); break;
        case ActKind::Relu6: cuda::tmap2(c_, v, g, o, n, Relu6B{}); break;
        case ActKind::Sigmoid: cuda::tmap2(c_, v, g, o, n, SigmoidB{}); break;
        case ActKind::Tanh: cuda::tmap2(c_, v, g, o, n, TanhB{}); break;
        case ActKind::Linear: break;
      }
    });
  }

 private:
  CudaContext& c_;
  ActivationParams p_;
};

static RegisterKernel<ActivationKernel, CudaActivation> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
