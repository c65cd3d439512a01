// CUDA activation: linear, relu, relu6, sigmoid, tanh, gelu (exact and tanh) and silu forward/backward as element-wise maps over any float type (cpu_activation.cpp's formulas).
#include "core/ops/activation.h"
#include "core/ops/math/activation_math.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"

namespace trainer {
namespace {

// Forward maps y = f(x) and backward maps dx = f(v, dy), v being y (backward_reads_y) or x (gelu),
// in float: activation_math.h's formulas, the CPU's (bf16/f16 loaded and rounded
// once by cuda::tmap1/tmap2). ReLU and ReLU6 are clamps (a NaN stays NaN: activation_math.h), as batch norm's fused ones.
struct ClampF {
  act::Clamp c;
  __device__ float operator()(float a) const { return act::clamp(a, c); }
};
struct SigmoidF {
  __device__ float operator()(float a) const { return act::sigmoid(a); }
};
struct TanhF {
  __device__ float operator()(float a) const { return act::tanh_of(a); }
};
struct GeluF {
  __device__ float operator()(float a) const { return act::gelu(a); }
};
struct GeluTanhF {
  __device__ float operator()(float a) const { return act::gelu_tanh(a); }
};
struct SiluF {
  __device__ float operator()(float a) const { return act::silu(a); }
};

struct ClampB {  // the derivative at the bounds is taken as 0 (as TF and PyTorch)
  act::Clamp c;
  __device__ float operator()(float v, float g) const { return act::through(g, v, c); }
};
struct SigmoidB {
  __device__ float operator()(float v, float g) const { return act::sigmoid_grad(v, g); }
};
struct TanhB {
  __device__ float operator()(float v, float g) const { return act::tanh_grad(v, g); }
};
struct GeluB {  // v is x (backward_reads_x)
  __device__ float operator()(float v, float g) const { return act::gelu_grad(v, g); }
};
struct GeluTanhB {
  __device__ float operator()(float v, float g) const { return act::gelu_tanh_grad(v, g); }
};
struct SiluB {  // v is x (backward_reads_x)
  __device__ float operator()(float v, float g) const { return act::silu_grad(v, g); }
};

class CudaActivation final : public ActivationKernel {
 public:
  CudaActivation(OpContext& ctx, const ActivationParams& p) : ActivationKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y) override {
    const int64_t n = x.numel();
    if (p_.kind == ActKind::Linear) {
      if (y.data() != x.data()) c_.copy(y.data(), x.data(), x.bytes());
      return;
    }
    cuda::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      const T* a = cuda::ptr<const T>(x);  // y may alias x
      T* o = cuda::ptr<T>(y);
      switch (p_.kind) {
        case ActKind::Relu:
        case ActKind::Relu6: cuda::tmap1(c_, a, o, n, ClampF{act::clamp_of(p_.kind)}); break;
        case ActKind::Sigmoid: cuda::tmap1(c_, a, o, n, SigmoidF{}); break;
        case ActKind::Tanh: cuda::tmap1(c_, a, o, n, TanhF{}); break;
        case ActKind::Gelu: cuda::tmap1(c_, a, o, n, GeluF{}); break;
        case ActKind::GeluTanh: cuda::tmap1(c_, a, o, n, GeluTanhF{}); break;
        case ActKind::Silu: cuda::tmap1(c_, a, o, n, SiluF{}); break;
        case ActKind::Linear: break;
      }
    });
  }

  void backward_impl(const Tensor& in, const Tensor& dy, Tensor& dx) override {
    const int64_t n = in.numel();
    if (p_.kind == ActKind::Linear) {
      if (dx.data() != dy.data()) c_.copy(dx.data(), dy.data(), dy.bytes());
      return;
    }
    cuda::dispatch_float(kName, "dy", dy, [&](auto tag) {
      using T = decltype(tag);
      const T* v = cuda::ptr<const T>(in);  // dx may alias dy
      const T* g = cuda::ptr<const T>(dy);
      T* o = cuda::ptr<T>(dx);
      switch (p_.kind) {
        case ActKind::Relu:
        case ActKind::Relu6: cuda::tmap2(c_, v, g, o, n, ClampB{act::clamp_of(p_.kind)}); break;
        case ActKind::Sigmoid: cuda::tmap2(c_, v, g, o, n, SigmoidB{}); break;
        case ActKind::Tanh: cuda::tmap2(c_, v, g, o, n, TanhB{}); break;
        case ActKind::Gelu: cuda::tmap2(c_, v, g, o, n, GeluB{}); break;
        case ActKind::GeluTanh: cuda::tmap2(c_, v, g, o, n, GeluTanhB{}); break;
        case ActKind::Silu: cuda::tmap2(c_, v, g, o, n, SiluB{}); break;
        case ActKind::Linear: break;
      }
    });
  }

  CudaContext& c_;
};

static RegisterKernel<ActivationKernel, CudaActivation> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
