// CPU activation: every ActKind forward/backward on f32 or bf16 as OpenMP loops over activation_math.h's formulas (vectorised where the formula is); gelu on f32 and bf16 by oneDNN's eltwise (the gelu fast path).
#include <cmath>
#include <cstring>

#include "core/ops/activation.h"
#include "core/ops/math/activation_math.h"
#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/fast_paths.h"

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

// The gelu fast path (FastPath::Gelu): oneDNN's eltwise gelu_erf / gelu_tanh on f32 or bf16 (which
// it computes in f32 and rounds once, as the loop below does), forward and backward from x,
// JIT-vectorised for the CPU it runs on (its erf is a polynomial approximation:
// tests/unit/ops/fastpath_gelu_test.cpp bounds its distance to the libm loop below, the reference).
// On the GPT of configs/gpt_bytes.yaml the libm loop took a fifth of the step (erff is not vectorised
// by GCC without -ffast-math). Both types take it, so that a bf16 result is the f32 path's rounded
// (tests/unit/ops/bf16_memory_ops_test.cpp): a bf16 loop beside an f32 oneDNN differed in 0.4% of
// the outputs and 18% of the gradients by a bf16 unit.
class OnednnGelu {
 public:
  OnednnGelu(CpuContext& c, int64_t n, dnnl::algorithm alg, dnnl::memory::data_type t)
      : c_(c), md_({n}, t, dnnl::memory::format_tag::a) {
    fwd_pd_ = dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md_, 0.0f, 0.0f), c.engine());
    fwd_ = dnnl::eltwise_forward(fwd_pd_);
    bwd_ = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
        dnnl::eltwise_backward::desc(alg, md_, md_, 0.0f, 0.0f), c.engine(), fwd_pd_));
  }
  void forward(const Tensor& x, Tensor& y) {
    fwd_.execute(c_.stream(), {{DNNL_ARG_SRC, arg(x)}, {DNNL_ARG_DST, arg(y)}});
    c_.stream().wait();
  }
  void backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
    bwd_.execute(c_.stream(), {{DNNL_ARG_SRC, arg(x)}, {DNNL_ARG_DIFF_DST, arg(dy)}, {DNNL_ARG_DIFF_SRC, arg(dx)}});
    c_.stream().wait();
  }

 private:
  dnnl::memory arg(const Tensor& t) { return cpu::mem(md_, c_.engine(), t.data()); }

  CpuContext& c_;
  dnnl::memory::desc md_;
  dnnl::eltwise_forward::primitive_desc fwd_pd_;
  dnnl::eltwise_forward fwd_;
  dnnl::eltwise_backward bwd_;
};

class CpuActivation final : public ActivationKernel {
 public:
  CpuActivation(OpContext& ctx, const ActivationParams& p)
      : ActivationKernel(ctx, p), c_(ctx), fast_gelu_(ctx.fast_paths().has(FastPath::Gelu)) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y) override {
    cpu::refuse_f16(kName, "x", x);
    if (p_.kind == ActKind::Linear) {
      if (y.data() != x.data()) c_.copy(y.data(), x.data(), x.bytes());
      return;
    }
    if (gelu_fast(x)) return gelu(x).forward(x, y);
    cpu::dispatch_float(kName, "x", x, [&](auto t) {
      using T = decltype(t);
      const T* a = x.as<T>();
      T* o = y.as<T>();
      act::with_formula(p_.kind, p_.alpha, [&](auto f) { map1(a, o, x.numel(), f); });
    });
  }

  void backward_impl(const Tensor& in, const Tensor& dy, Tensor& dx) override {
    cpu::refuse_f16(kName, "dy", dy);
    if (p_.kind == ActKind::Linear) {
      if (dx.data() != dy.data()) c_.copy(dx.data(), dy.data(), dy.bytes());
      return;
    }
    if (gelu_fast(dy)) return gelu(dy).backward(in, dy, dx);
    cpu::dispatch_float(kName, "dy", dy, [&](auto t) {
      using T = decltype(t);
      const T* v = in.as<T>();  // y, or x (backward_reads_x); dx may alias dy
      const T* g = dy.as<T>();
      T* o = dx.as<T>();
      act::with_formula(p_.kind, p_.alpha, [&](auto f) { map2(v, g, o, in.numel(), act::GradOf<decltype(f)>{f}); });
    });
  }

  bool gelu_fast(const Tensor& t) const {
    return fast_gelu_ && (p_.kind == ActKind::Gelu || p_.kind == ActKind::GeluTanh) &&
           (t.dtype() == DType::F32 || t.dtype() == DType::BF16) && t.numel() > 0;
  }
  // The primitives for t's size and type (the graph may hand one kernel f32 and bf16 tensors).
  OnednnGelu& gelu(const Tensor& t) {
    return gelu_.get({t.numel(), int64_t(t.dtype())}, [&] {
      return OnednnGelu(cpu_context(c_), t.numel(),
                        p_.kind == ActKind::Gelu ? dnnl::algorithm::eltwise_gelu_erf : dnnl::algorithm::eltwise_gelu_tanh,
                        t.dtype() == DType::BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32);
    });
  }

  OpContext& c_;
  const bool fast_gelu_;
  cpu::ShapeCache<OnednnGelu> gelu_;
};

static RegisterKernel<ActivationKernel, CpuActivation> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
