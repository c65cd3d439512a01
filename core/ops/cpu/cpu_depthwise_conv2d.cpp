// CPU depthwise conv2d: oneDNN grouped convolution (groups = C) on NHWC activations; Keras [kh,kw,C,M] weights reordered.
#include <cstring>
#include <unordered_map>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/depthwise_conv2d.h"

// oneDNN expresses a depthwise convolution as a grouped one: G = C groups of IC/G = 1 input channel
// and OC/G = M output channels, weights dims {G, OC/G, IC/G, KH, KW} = {C, M, 1, kh, kw}. Output
// channel g * M + m is Keras' c * M + m. Keras' kernel [kh, kw, C, M] is oneDNN's `hwigo` layout
// (H, W, then I = 1, G, O innermost), so it is described as is and reordered into whatever blocked
// layout the primitive picks (format_tag::any). With M = 1, oneDNN 2.6 on AVX-512 picks
// brdgmm_dw (forward) and jit_dw (backward data and weights) for NHWC; M > 1 is a general grouped
// convolution (jit:avx512_core). Padding: oneDNN takes padding_l / padding_r separately, so Keras'
// asymmetric 'same' needs no extra copy.

namespace trainer {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// Everything one input shape needs (backward parts on first use, as in cpu_conv2d.cpp).
struct DwPlan {
  ConvGeometry g{};
  memory::desc src_md, dst_md, bias_md, user_w_md;
  memory::dims wdims, strides, dilates, pad_l, pad_r;

  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  dnnl::reorder w_to_fwd;  // empty when the primitive takes the Keras layout as is
  Tensor w_fwd;

  bool have_bwd_data = false;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::reorder w_to_bwd;
  Tensor w_bwd;

  bool have_bwd_weights = false;
  dnnl::convolution_backward_weights::primitive_desc bwd_w_pd;
  dnnl::convolution_backward_weights bwd_w;
  dnnl::reorder dw_to_user;
  Tensor dw_buf;
};

// A reorder from `from` to `to` and a buffer for the primitive's layout `buf_md`, unless the two
// layouts agree (then the user's buffer is used directly and `r` stays empty).
void make_reorder(CpuContext& c, const memory::desc& from, const memory::desc& to, dnnl::reorder& r, Tensor& buf,
                  const memory::desc& buf_md) {
  if (from == to) return;
  r = dnnl::reorder(dnnl::reorder::primitive_desc(c.engine(), from, c.engine(), to));
  buf = c.empty({int64_t(buf_md.get_size())}, DType::U8);
}

class CpuDepthwiseConv2d final : public DepthwiseConv2dKernel {
 public:
  CpuDepthwiseConv2d(OpContext& ctx, const DepthwiseConv2dParams& p) : c_(cpu_context(ctx)), p_(p) {
    if (p.multiplier <= 0) cpu::fail("depthwise_conv2d: depth multiplier must be positive, got {}", p.multiplier);
    if (p.kh < 1 || p.kw < 1 || p.sh < 1 || p.sw < 1 || p.dh < 1 || p.dw < 1)
      cpu::fail("depthwise_conv2d: kernel {}x{}, strides {}x{} and dilation {}x{} must be positive", p.kh, p.kw, p.sh,
                p.sw, p.dh, p.dw);
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    ConvGeometry g = check(x, w, b, p_.bias);
    cpu::require_shape(kOp, "y", y, {g.n, g.oh, g.ow, g.oc});
    if (g.n == 0 || g.oh == 0 || g.ow == 0 || g.oc == 0) return;
    DwPlan& pl = plan(x.shape(), g);
    auto& eng = c_.engine();
    memory wmem = cpu::mem(pl.user_w_md, eng, w.data());
    if (pl.w_to_fwd) {
      memory wf(pl.fwd_pd.weights_desc(), eng, pl.w_fwd.data());
      pl.w_to_fwd.execute(c_.stream(), wmem, wf);
      wmem = wf;
    }
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, cpu::mem(pl.src_md, eng, x.data())},
                                            {DNNL_ARG_WEIGHTS, wmem},
                                            {DNNL_ARG_DST, cpu::mem(pl.dst_md, eng, y.data())},
                                            {DNNL_ARG_SCRATCHPAD, cpu::scratchpad(pl.fwd_pd, eng)}};
    if (p_.bias) args[DNNL_ARG_BIAS] = cpu::mem(pl.bias_md, eng, b.data());
    pl.fwd.execute(c_.stream(), args);
    c_.stream().wait();
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) override {
    ConvGeometry g = check(x, w, Tensor(), false);
    cpu::require_shape(kOp, "dy", dy, {g.n, g.oh, g.ow, g.oc});
    cpu::require_shape(kOp, "dw", dw, w.shape());
    if (p_.bias) cpu::require_shape(kOp, "db", db, {g.oc});
    if (dx.defined()) cpu::require_shape(kOp, "dx", dx, x.shape());
    if (g.n == 0 || g.oh == 0 || g.ow == 0 || g.oc == 0) {  // no output: every gradient is zero
      std::memset(dw.data(), 0, dw.bytes());
      if (p_.bias) std::memset(db.data(), 0, db.bytes());
      if (dx.defined()) std::memset(dx.data(), 0, dx.bytes());
      return;
    }
    DwPlan& pl = plan(x.shape(), g);
    auto& eng = c_.engine();
    auto& s = c_.stream();
    memory src = cpu::mem(pl.src_md, eng, x.data());
    memory ddst = cpu::mem(pl.dst_md, eng, dy.data());

    if (dx.defined()) {
      if (!pl.have_bwd_data) make_bwd_data(pl);
      memory wmem = cpu::mem(pl.user_w_md, eng, w.data());
      if (pl.w_to_bwd) {
        memory wb(pl.bwd_data_pd.weights_desc(), eng, pl.w_bwd.data());
        pl.w_to_bwd.execute(s, wmem, wb);
        wmem = wb;
      }
      pl.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, ddst},
                              {DNNL_ARG_WEIGHTS, wmem},
                              {DNNL_ARG_DIFF_SRC, cpu::mem(pl.src_md, eng, dx.data())},
                              {DNNL_ARG_SCRATCHPAD, cpu::scratchpad(pl.bwd_data_pd, eng)}});
    }

    if (!pl.have_bwd_weights) make_bwd_weights(pl);
    memory user_dw = cpu::mem(pl.user_w_md, eng, dw.data());
    memory dwmem = pl.dw_to_user ? memory(pl.bwd_w_pd.diff_weights_desc(), eng, pl.dw_buf.data()) : user_dw;
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src},
                                            {DNNL_ARG_DIFF_DST, ddst},
                                            {DNNL_ARG_DIFF_WEIGHTS, dwmem},
                                            {DNNL_ARG_SCRATCHPAD, cpu::scratchpad(pl.bwd_w_pd, eng)}};
    if (p_.bias) args[DNNL_ARG_DIFF_BIAS] = cpu::mem(pl.bias_md, eng, db.data());
    pl.bwd_w.execute(s, args);
    if (pl.dw_to_user) pl.dw_to_user.execute(s, dwmem, user_dw);
    s.wait();
  }

 private:
  static constexpr const char* kOp = "depthwise_conv2d";

  ConvGeometry check(const Tensor& x, const Tensor& w, const Tensor& b, bool need_bias) const {
    cpu::require_rank(kOp, "x", x, 4);
    ConvGeometry g = depthwise_conv2d_geometry(x.shape(), p_);
    cpu::require_shape(kOp, "w", w, depthwise_conv2d_weight_shape(g.ic, p_));
    if (need_bias) cpu::require_shape(kOp, "b", b, {g.oc});
    return g;
  }

  DwPlan& plan(const Shape& xs, const ConvGeometry& g) {
    return cache_.get(xs.dims(), [&] { return make_plan(g); });
  }

  memory::desc any_weights(const DwPlan& pl) const { return memory::desc(pl.wdims, dt::f32, tag::any); }

  DwPlan make_plan(const ConvGeometry& g) {
    DwPlan pl;
    pl.g = g;
    pl.src_md = cpu::nhwc_md({g.n, g.ih, g.iw, g.ic});
    pl.dst_md = cpu::nhwc_md({g.n, g.oh, g.ow, g.oc});
    pl.bias_md = memory::desc({g.oc}, dt::f32, tag::a);
    pl.wdims = {g.ic, p_.multiplier, 1, p_.kh, p_.kw};
    pl.user_w_md = memory::desc(pl.wdims, dt::f32, tag::hwigo);
    pl.strides = {p_.sh, p_.sw};
    pl.dilates = {p_.dh - 1, p_.dw - 1};
    pl.pad_l = {g.pt, g.pl};
    pl.pad_r = {g.pb, g.pr};
    auto alg = dnnl::algorithm::convolution_direct;
    auto pk = dnnl::prop_kind::forward_training;
    auto d = p_.bias ? dnnl::convolution_forward::desc(pk, alg, pl.src_md, any_weights(pl), pl.bias_md, pl.dst_md,
                                                       pl.strides, pl.dilates, pl.pad_l, pl.pad_r)
                     : dnnl::convolution_forward::desc(pk, alg, pl.src_md, any_weights(pl), pl.dst_md, pl.strides,
                                                       pl.dilates, pl.pad_l, pl.pad_r);
    pl.fwd_pd = dnnl::convolution_forward::primitive_desc(d, cpu::user_scratchpad_attr(), c_.engine());
    pl.fwd = dnnl::convolution_forward(pl.fwd_pd);
    make_reorder(c_, pl.user_w_md, pl.fwd_pd.weights_desc(), pl.w_to_fwd, pl.w_fwd, pl.fwd_pd.weights_desc());
    return pl;
  }

  void make_bwd_data(DwPlan& pl) {
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, pl.src_md, any_weights(pl), pl.dst_md,
                                            pl.strides, pl.dilates, pl.pad_l, pl.pad_r);
    pl.bwd_data_pd =
        dnnl::convolution_backward_data::primitive_desc(d, cpu::user_scratchpad_attr(), c_.engine(), pl.fwd_pd);
    pl.bwd_data = dnnl::convolution_backward_data(pl.bwd_data_pd);
    make_reorder(c_, pl.user_w_md, pl.bwd_data_pd.weights_desc(), pl.w_to_bwd, pl.w_bwd, pl.bwd_data_pd.weights_desc());
    pl.have_bwd_data = true;
  }

  void make_bwd_weights(DwPlan& pl) {
    auto alg = dnnl::algorithm::convolution_direct;
    auto d = p_.bias ? dnnl::convolution_backward_weights::desc(alg, pl.src_md, any_weights(pl), pl.bias_md, pl.dst_md,
                                                                pl.strides, pl.dilates, pl.pad_l, pl.pad_r)
                     : dnnl::convolution_backward_weights::desc(alg, pl.src_md, any_weights(pl), pl.dst_md, pl.strides,
                                                                pl.dilates, pl.pad_l, pl.pad_r);
    pl.bwd_w_pd =
        dnnl::convolution_backward_weights::primitive_desc(d, cpu::user_scratchpad_attr(), c_.engine(), pl.fwd_pd);
    pl.bwd_w = dnnl::convolution_backward_weights(pl.bwd_w_pd);
    make_reorder(c_, pl.bwd_w_pd.diff_weights_desc(), pl.user_w_md, pl.dw_to_user, pl.dw_buf,
                 pl.bwd_w_pd.diff_weights_desc());
    pl.have_bwd_weights = true;
  }

  CpuContext& c_;
  DepthwiseConv2dParams p_;
  cpu::ShapeCache<DwPlan> cache_;
};

static RegisterKernel<DepthwiseConv2dKernel, CpuDepthwiseConv2d> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
