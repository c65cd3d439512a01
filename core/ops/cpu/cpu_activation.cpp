// CPU activation: linear, relu, relu6, sigmoid and tanh forward/backward as vectorised OpenMP loops.
#include <cmath>
#include <cstring>

#include "core/ops/activation.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer {
namespace {

// Numerically safe for any x: exp never overflows.
inline float sigmoid(float x) {
  float e = std::exp(-std::fabs(x));
  float s = 1.0f / (1.0f + e);
  return x >= 0 ? s : 1.0f - s;
}

class CpuActivation final : public ActivationKernel {
 public:
  CpuActivation(OpContext& ctx, const ActivationParams& p) : c_(ctx), p_(p) {}

  void forward(const Tensor& x, Tensor& y) override {
    cpu::require_f32("activation", "x", x);
    cpu::require_shape("activation", "y", y, x.shape());
    const float* a = x.f32();  // y may alias x: no __restrict
    float* o = y.f32();
    int64_t n = x.numel();
    bool par = n > cpu::kParallelGrain;
    switch (p_.kind) {
      case ActKind::Linear:
        if (o != a) c_.copy(o, a, x.bytes());
        break;
      case ActKind::Relu:
#pragma omp parallel for simd schedule(static) if (par)
        for (int64_t i = 0; i < n; ++i) o[i] = a[i] > 0.0f ? a[i] : 0.0f;
        break;
      case ActKind::Relu6:
#pragma omp parallel for simd schedule(static) if (par)
        for (int64_t i = 0; i < n; ++i) o[i] = a[i] > 0.0f ? (a[i] < 6.0f ? a[i] : 6.0f) : 0.0f;  // vectorises (fmin/fmax do not)
        break;
      case ActKind::Sigmoid:
#pragma omp parallel for simd schedule(static) if (par)
        for (int64_t i = 0; i < n; ++i) o[i] = sigmoid(a[i]);
        break;
      case ActKind::Tanh:
#pragma omp parallel for simd schedule(static) if (par)
        for (int64_t i = 0; i < n; ++i) o[i] = std::tanh(a[i]);
        break;
    }
  }

  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    const bool uses_y = backward_reads_y(p_.kind);
    const Tensor& in = uses_y ? y : x;
    cpu::require_f32("activation", uses_y ? "y" : "x", in);
    cpu::require_shape("activation", "dy", dy, in.shape());
    cpu::require_shape("activation", "dx", dx, in.shape());
    const float* v = in.f32();  // dx may alias dy
    const float* g = dy.f32();
    float* o = dx.f32();
    int64_t n = in.numel();
    bool par = n > cpu::kParallelGrain;
    switch (p_.kind) {
      case ActKind::Linear:
        if (o != g) c_.copy(o, g, dy.bytes());
        break;
      case ActKind::Relu:  // from y; the derivative at 0 is taken as 0 (as TF and PyTorch)
#pragma omp parallel for simd schedule(static) if (par)
        for (int64_t i = 0; i < n; ++i) o[i] = v[i] > 0.0f ? g[i] : 0.0f;
        break;
      case ActKind::Relu6:  // from y: 0 < y < 6 exactly where 0 < x < 6
#pragma omp parallel for simd schedule(static) if (par)
        for (int64_t i = 0; i < n; ++i) o[i] = (v[i] > 0.0f && v[i] < 6.0f) ? g[i] : 0.0f;
        break;
      case ActKind::Sigmoid:
#pragma omp parallel for simd schedule(static) if (par)
        for (int64_t i = 0; i < n; ++i) o[i] = g[i] * v[i] * (1.0f - v[i]);
        break;
      case ActKind::Tanh:
#pragma omp parallel for simd schedule(static) if (par)
        for (int64_t i = 0; i < n; ++i) o[i] = g[i] * (1.0f - v[i] * v[i]);
        break;
    }
  }

 private:
  OpContext& c_;
  ActivationParams p_;
};

static RegisterKernel<ActivationKernel, CpuActivation> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
