// CUDA activation: every ActKind forward/backward as element-wise maps over any float type (activation_math.h's formulas, the CPU's).
#include "core/ops/activation.h"
#include "core/ops/math/activation_math.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"

namespace trainer {
namespace {

// Forward maps y = f(x) and backward maps dx = grad(v, dy), v being y (backward_reads_y) or x, in
// float: activation_math.h's formulas (act::with_formula), the CPU's (bf16/f16 loaded and rounded
// once by cuda::tmap1/tmap2). ReLU and ReLU6 are clamps (a NaN stays NaN), as batch norm's fused ones.
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
      act::with_formula(p_.kind, p_.alpha, [&](auto f) { cuda::tmap1(c_, a, o, n, f); });
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
      act::with_formula(p_.kind, p_.alpha, [&](auto f) { cuda::tmap2(c_, v, g, o, n, act::GradOf<decltype(f)>{f}); });
    });
  }

  CudaContext& c_;
};

static RegisterKernel<ActivationKernel, CudaActivation> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
