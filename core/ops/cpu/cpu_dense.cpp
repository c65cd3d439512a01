// CPU dense: y = x·w + b over the last axis and its gradients, through oneDNN's sgemm (fp32) or bf16 matmuls.
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "core/ops/cpu/cpu_bf16.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_transpose.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/dense.h"
#include "core/ops/fast_paths.h"

namespace trainer {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// The bf16 path (precision bf16) for one input shape: x [n,k] · w [k,u] as three oneDNN matmuls on
// bf16 x, w and dy, accumulating in f32 and writing y and dx in the activations' type, dw in f32:
//   y  = x · w + b     src x [n,k],                weights w [k,u]
//   dx = dy · wᵀ       src dy [n,u],               weights w [k,u] read as [u,k] (tag ba)
//   dw = xᵀ · dy       src x [n,k] read as [k,n],  weights dy [n,u]
// The transposes are strides on the same bf16 buffers. `low`: x, y, dy and dx are bf16 tensors
// (the layer computing in bf16), read and written where they are; else they are f32 (the logits'
// layer), x and dy converted into per-thread scratch. w is converted into a buffer of the plan;
// forward and backward each convert what they read (as the convolutions do: nothing is kept
// between the two, see cpu_onednn_conv.cpp).
//
// With `transpose` (the dense_wgrad fast path) dw's matmul reads no operand through strides: oneDNN's
// brgemm matmul reading x transposed took 1.4-1.5x as long as on a transposed copy (gpt_bytes'
// shapes, two threads, 2026-12-01; dw was a third of its bf16 backward). The narrower of x and dy
// (fewer columns; dy on a tie: it was just written, x comes from the forward) is copied transposed
// into per-thread scratch (cpu_transpose.h):
//   x narrower:  dw  = (xᵀ) · dy      src the copy [k,n],  weights dy [n,u]
//   dy narrower: dwᵀ = (dyᵀ) · x      src the copy [u,n],  weights x [n,k], then dwᵀ [u,k] in f32
//                                     scratch transposed into dw
// The same products, summed in another order: dw is not the same bits on the two paths
// (tests/unit/ops/fastpath_dense_test.cpp), and on each the same at any thread count.
class Bf16Dense {
 public:
  Bf16Dense(CpuContext& c, int64_t n, int64_t k, int64_t u, bool bias, bool low, bool transpose)
      : c_(c), low_(low), transpose_(transpose), dy_t_(transpose && u <= k), n_(n), k_(k), u_(u) {
    auto& eng = c.engine();
    memory::desc x_f({n, k}, dt::f32, tag::ab), w_f({k, u}, dt::f32, tag::ab), dy_f({n, u}, dt::f32, tag::ab);
    x_ = cpu::Bf16Convert(eng, x_f, memory::desc({n, k}, dt::bf16, tag::ab));
    w_ = cpu::Bf16Convert(eng, w_f, memory::desc({k, u}, dt::bf16, tag::ab));
    dy_ = cpu::Bf16Convert(eng, dy_f, memory::desc({n, u}, dt::bf16, tag::ab));
    w_bf16_ = c.empty({int64_t(w_.to.get_size())}, DType::U8);
    y_md_ = low ? dy_.to : dy_f;
    dx_md_ = low ? x_.to : x_f;
    dw_md_ = w_f;
    wt_md_ = memory::desc({u, k}, dt::bf16, tag::ba);
    xt_md_ = memory::desc({k, n}, dt::bf16, transpose ? tag::ab : tag::ba);
    dyt_md_ = memory::desc({u, n}, dt::bf16, tag::ab);
    dwt_md_ = memory::desc({u, k}, dt::f32, tag::ab);
    bias_md_ = memory::desc({1, u}, dt::f32, tag::ab);
    fwd_pd_ = bias ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(x_.to, w_.to, bias_md_, y_md_), attr(), eng)
                   : dnnl::matmul::primitive_desc(dnnl::matmul::desc(x_.to, w_.to, y_md_), attr(), eng);
    fwd_ = dnnl::matmul(fwd_pd_);
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
    auto& eng = c_.engine();
    auto& s = c_.stream();
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, source(x)},
                                            {DNNL_ARG_WEIGHTS, w_.run(eng, s, w.data(), w_bf16_.data())},
                                            {DNNL_ARG_DST, cpu::mem(y_md_, eng, y.data())},
                                            {DNNL_ARG_SCRATCHPAD, cpu::scratchpad(fwd_pd_, eng)}};
    if (b.defined()) args[DNNL_ARG_BIAS] = cpu::mem(bias_md_, eng, b.data());
    fwd_.execute(s, args);
    s.wait();
  }

  // dx (when defined) and dw; the bias gradient is the caller's (an exact f32 sum of dy).
  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw) {
    auto& eng = c_.engine();
    auto& s = c_.stream();
    if (!bwd_made_) make_backward();
    memory xb = source(x);
    w_.run(eng, s, w.data(), w_bf16_.data());
    memory g = low_ ? cpu::mem(dy_.to, eng, dy.data())
                    : dy_.run(eng, s, dy.data(), cpu::thread_scratch(cpu::kScratchBf16Grad, dy_.to.get_size()));
    if (dx.defined())
      bwd_data_.execute(s, {{DNNL_ARG_SRC, g},
                            {DNNL_ARG_WEIGHTS, cpu::mem(wt_md_, eng, w_bf16_.data())},
                            {DNNL_ARG_DST, cpu::mem(dx_md_, eng, dx.data())},
                            {DNNL_ARG_SCRATCHPAD, cpu::scratchpad(bwd_data_pd_, eng)}});
    if (!transpose_) {
      w_grad(bwd_w_, bwd_w_pd_, cpu::mem(xt_md_, eng, xb.get_data_handle()), g, dw.data());
    } else if (!dy_t_) {
      w_grad(bwd_w_, bwd_w_pd_, copy_t(xb, k_, xt_md_), g, dw.data());
    } else {
      auto* dwt = static_cast<float*>(cpu::thread_scratch(cpu::kScratchTransposedW, size_t(u_ * k_) * sizeof(float)));
      w_grad(bwd_w_, bwd_w_pd_, copy_t(g, u_, dyt_md_), cpu::mem(x_.to, eng, xb.get_data_handle()), dwt);
      s.wait();
      cpu::transpose_f32(dwt, k_, u_, k_, dw.f32(), u_);
    }
    s.wait();
  }

 private:
  static dnnl::primitive_attr attr() { return cpu::user_scratchpad_attr(); }
  void w_grad(dnnl::matmul& p, const dnnl::matmul::primitive_desc& pd, const memory& src, const memory& wei, void* dst) {
    auto& eng = c_.engine();
    p.execute(c_.stream(), {{DNNL_ARG_SRC, src},
                            {DNNL_ARG_WEIGHTS, wei},
                            {DNNL_ARG_DST, cpu::mem(pd.dst_desc(), eng, dst)},
                            {DNNL_ARG_SCRATCHPAD, cpu::scratchpad(pd, eng)}});
  }
  // The bf16 matrix m [n, cols] copied transposed into per-thread scratch, seen as `md` [cols, n].
  memory copy_t(const memory& m, int64_t cols, const memory::desc& md) {
    c_.stream().wait();  // m may be a conversion queued on the stream
    auto* t = static_cast<uint16_t*>(cpu::thread_scratch(cpu::kScratchTranspose, size_t(cols * n_) * sizeof(uint16_t)));
    cpu::transpose_bf16(static_cast<const uint16_t*>(m.get_data_handle()), cols, n_, cols, t, n_);
    return cpu::mem(md, c_.engine(), t);
  }
  memory source(const Tensor& x) {
    if (low_) return cpu::mem(x_.to, c_.engine(), x.data());
    return x_.run(c_.engine(), c_.stream(), x.data(), cpu::thread_scratch(cpu::kScratchBf16Src, x_.to.get_size()));
  }

  // Created by the first backward (shapes only evaluated never need them).
  void make_backward() {
    auto& eng = c_.engine();
    bwd_data_pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(dy_.to, wt_md_, dx_md_), attr(), eng);
    bwd_data_ = dnnl::matmul(bwd_data_pd_);
    bwd_w_pd_ = dy_t_ ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(dyt_md_, x_.to, dwt_md_), attr(), eng)
                      : dnnl::matmul::primitive_desc(dnnl::matmul::desc(xt_md_, dy_.to, dw_md_), attr(), eng);
    bwd_w_ = dnnl::matmul(bwd_w_pd_);
    bwd_made_ = true;
  }

  CpuContext& c_;
  bool low_;        // x, y, dy and dx are bf16 tensors (the layer in the low type), else f32
  bool transpose_;  // dw from a transposed copy of x or dy (the dense_wgrad fast path)
  bool dy_t_;       // of dy (u ≤ k): dwᵀ, then transposed
  int64_t n_, k_, u_;
  cpu::Bf16Convert x_, w_, dy_;
  Tensor w_bf16_;
  memory::desc y_md_, dx_md_, dw_md_, wt_md_, xt_md_, dyt_md_, dwt_md_, bias_md_;
  dnnl::matmul::primitive_desc fwd_pd_, bwd_data_pd_, bwd_w_pd_;
  dnnl::matmul fwd_, bwd_data_, bwd_w_;
  bool bwd_made_ = false;
};

class CpuDense final : public DenseKernel {
 public:
  CpuDense(OpContext& ctx, const DenseParams& p)
      : DenseKernel(ctx, p),
        c_(cpu_context(ctx)),
        transpose_(ctx.fast_paths().has(FastPath::DenseWgrad) && cpu::transpose_bf16_available()) {}

 private:
  void forward_impl(int64_t n, int64_t k, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const int64_t u = p_.units;
    if (n == 0) return;
    if (c_.bf16()) return bf16(n, k, x.dtype() == DType::BF16).forward(x, w, p_.bias ? b : Tensor(), y);
    cpu::linear_forward_f32("dense", n, k, u, x.f32(), w.f32(), p_.bias ? b.f32() : nullptr, y.f32());
  }

  void backward_impl(int64_t n, int64_t k, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db) override {
    const int64_t u = p_.units;
    if (n == 0) {
      std::memset(dw.data(), 0, dw.bytes());
      if (p_.bias) std::memset(db.data(), 0, db.bytes());
      return;
    }
    if (c_.bf16()) {
      bf16(n, k, x.dtype() == DType::BF16).backward(x, w, dy, dx, dw);
    } else {
      if (dx.defined()) cpu::sgemm("dense", 'N', 'T', n, k, u, dy.f32(), u, w.f32(), u, 0.0f, dx.f32(), k);
      cpu::sgemm("dense", 'T', 'N', k, u, n, x.f32(), k, dy.f32(), u, 0.0f, dw.f32(), u);
    }
    if (p_.bias) cpu::column_sums("dense", dy, n, u, db.f32());
  }

  Bf16Dense& bf16(int64_t n, int64_t k, bool low) {
    return plans_.get({n, k, low}, [&] { return Bf16Dense(c_, n, k, p_.units, p_.bias, low, transpose_); });
  }

  CpuContext& c_;
  const bool transpose_;              // FastPath::DenseWgrad, where the CPU has AVX-512
  cpu::ShapeCache<Bf16Dense> plans_;  // bf16 only: one per [rows, K]
};

static RegisterKernel<DenseKernel, CpuDense> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
