// CPU activation: linear, relu, relu6, sigmoid, tanh and gelu (exact and tanh) forward/backward on f32 or bf16 as vectorised OpenMP loops (activation_math.h's formulas).
#include <cmath>
#include <cstring>

#include "core/ops/activation.h"
#include "core/ops/math/activation_math.h"
#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer {
namespace {

// o[i] = f(a[i]), computed in float and stored as T. o may alias a (in place): element i is read
// before it is written, so no __restrict.
template <class T, class F>
void map1(const T* a, T* o, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) o[i] = cpu::from_f32<T>(f(cpu::to_f32(a[i])));
}

// o[i] = f(v[i], g[i]); o may alias g.
template <class T, class F>
void map2(const T* v, const T* g, T* o, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) o[i] = cpu::from_f32<T>(f(cpu::to_f32(v[i]), cpu::to_f32(g[i])));
}

class CpuActivation final : public ActivationKernel {
 public:
  CpuActivation(OpContext& ctx, const ActivationParams& p) : ActivationKernel(ctx, p), c_(ctx) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y) override {
    cpu::refuse_f16(kName, "x", x);
    if (p_.kind == ActKind::Linear) {
      if (y.data() != x.data()) c_.copy(y.data(), x.data(), x.bytes());
      return;
    }
    cpu::dispatch_float(kName, "x", x, [&](auto t) {
      using T = decltype(t);
      const T* a = x.as<T>();
      T* o = y.as<T>();
      int64_t n = x.numel();
      switch (p_.kind) {
        case ActKind::Linear:
          break;
        case ActKind::Relu:
        case ActKind::Relu6: {  // clamps (as batch norm's fused activation)
          const act::Clamp c = act::clamp_of(p_.kind);
          map1(a, o, n, [c](float v) { return act::clamp(v, c); });
          break;
        }
        case ActKind::Sigmoid:
          map1(a, o, n, [](float v) { return act::sigmoid(v); });
          break;
        case ActKind::Tanh:
          map1(a, o, n, [](float v) { return act::tanh_of(v); });
          break;
        case ActKind::Gelu:
          map1(a, o, n, [](float v) { return act::gelu(v); });
          break;
        case ActKind::GeluTanh:
          map1(a, o, n, [](float v) { return act::gelu_tanh(v); });
          break;
      }
    });
  }

  void backward_impl(const Tensor& in, const Tensor& dy, Tensor& dx) override {
    cpu::refuse_f16(kName, "dy", dy);
    if (p_.kind == ActKind::Linear) {
      if (dx.data() != dy.data()) c_.copy(dx.data(), dy.data(), dy.bytes());
      return;
    }
    cpu::dispatch_float(kName, "dy", dy, [&](auto t) {
      using T = decltype(t);
      const T* v = in.as<T>();  // y, or x for gelu; dx may alias dy
      const T* g = dy.as<T>();
      T* o = dx.as<T>();
      int64_t n = in.numel();
      switch (p_.kind) {
        case ActKind::Linear:
          break;
        case ActKind::Relu:
        case ActKind::Relu6: {  // from y (act::through)
          const act::Clamp c = act::clamp_of(p_.kind);
          map2(v, g, o, n, [c](float yv, float gv) { return act::through(gv, yv, c); });
          break;
        }
        case ActKind::Sigmoid:
          map2(v, g, o, n, [](float yv, float gv) { return act::sigmoid_grad(yv, gv); });
          break;
        case ActKind::Tanh:
          map2(v, g, o, n, [](float yv, float gv) { return act::tanh_grad(yv, gv); });
          break;
        case ActKind::Gelu:  // from x (backward_reads_x)
          map2(v, g, o, n, [](float xv, float gv) { return act::gelu_grad(xv, gv); });
          break;
        case ActKind::GeluTanh:
          map2(v, g, o, n, [](float xv, float gv) { return act::gelu_tanh_grad(xv, gv); });
          break;
      }
    });
  }

  OpContext& c_;
};

static RegisterKernel<ActivationKernel, CpuActivation> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
