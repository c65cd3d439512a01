// CUDA activation: linear, relu, relu6, sigmoid and tanh forward/backward as element-wise maps (same formulas as cpu_activation.cpp).
#include "core/ops/activation.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"

namespace trainer {
namespace {

// Forward maps y = f(x).
struct ReluF {
  __device__ float operator()(float a) const { return a > 0.0f ? a : 0.0f; }
};
struct Relu6F {
  __device__ float operator()(float a) const { return fminf(fmaxf(a, 0.0f), 6.0f); }
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

// Backward maps dx = f(v, dy), v being x (relu, relu6) or y (sigmoid, tanh).
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
    cuda::require_f32("activation", "x", x, dev);
    cuda::require_shape("activation", "y", y, x.shape(), dev);
    const float* a = x.f32();  // y may alias x
    float* o = y.f32();
    int64_t n = x.numel();
    switch (p_.kind) {
      case ActKind::Linear:
        if (o != a) c_.copy(o, a, x.bytes());
        break;
      case ActKind::Relu: cuda::map1(c_, a, o, n, ReluF{}); break;
      case ActKind::Relu6: cuda::map1(c_, a, o, n, Relu6F{}); break;
      case ActKind::Sigmoid: cuda::map1(c_, a, o, n, SigmoidF{}); break;
      case ActKind::Tanh: cuda::map1(c_, a, o, n, TanhF{}); break;
    }
  }

  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    const Device dev = c_.device();
    const bool uses_y = backward_reads_y(p_.kind);
    const Tensor& in = uses_y ? y : x;
    cuda::require_f32("activation", uses_y ? "y" : "x", in, dev);
    cuda::require_shape("activation", "dy", dy, in.shape(), dev);
    cuda::require_shape("activation", "dx", dx, in.shape(), dev);
    const float* v = in.f32();  // dx may alias dy
    const float* g = dy.f32();
    float* o = dx.f32();
    int64_t n = in.numel();
    switch (p_.kind) {
      case ActKind::Linear:
        if (o != g) c_.copy(o, g, dy.bytes());
        break;
      case ActKind::Relu: cuda::map2(c_, v, g, o, n, ReluB{}); break;
      case ActKind::Relu6: cuda::map2(c_, v, g, o, n, Relu6B{}); break;
      case ActKind::Sigmoid: cuda::map2(c_, v, g, o, n, SigmoidB{}); break;
      case ActKind::Tanh: cuda::map2(c_, v, g, o, n, TanhB{}); break;
    }
  }

 private:
  CudaContext& c_;
  ActivationParams p_;
};

static RegisterKernel<ActivationKernel, CudaActivation> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
