// CPU conv2d: oneDNN convolution forward/backward on NHWC activations; HWIO weights reordered for the primitives.
#include <cstring>
#include <unordered_map>

#include "core/ops/conv2d.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// Everything one input shape needs: descriptors, primitives, reorders and the reordered weights.
// Backward parts are created on first use (evaluation shapes never need them).
struct ConvPlan {
  ConvGeometry g{};
  memory::desc src_md, dst_md, bias_md, user_w_md;
  memory::dims strides, dilates, pad_l, pad_r;

  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  dnnl::reorder w_to_fwd;  // empty when the primitive takes HWIO as is
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

// A reorder from `from` to `to` and a buffer laid out as `buf_md` (the primitive's side), unless
// the two layouts agree (then the user's HWIO buffer is used directly and `r` stays empty).
void make_reorder(CpuContext& c, const memory::desc& from, const memory::desc& to, dnnl::reorder& r, Tensor& buf,
                  const memory::desc& buf_md) {
  if (from == to) return;
  r = dnnl::reorder(dnnl::reorder::primitive_desc(c.engine(), from, c.engine(), to));
  buf = c.empty({int64_t(buf_md.get_size())}, DType::U8);
}

class CpuConv2d final : public Conv2dKernel {
 public:
  CpuConv2d(OpContext& ctx, const Conv2dParams& p) : c_(cpu_context(ctx)), p_(p) {
    if (p.filters <= 0) cpu::fail("conv2d: filters must be positive, got {}", p.filters);
    if (p.kh < 1 || p.kw < 1 || p.sh < 1 || p.sw < 1 || p.dh < 1 || p.dw < 1)
      cpu::fail("conv2d: kernel {}x{}, strides {}x{} and dilation {}x{} must be positive", p.kh, p.kw, p.sh, p.sw, p.dh,
                p.dw);
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    ConvGeometry g = check(x, w, b, p_.bias);
    cpu::require_shape("conv2d", "y", y, {g.n, g.oh, g.ow, g.oc});
    if (g.n == 0 || g.oh == 0 || g.ow == 0) return;
    ConvPlan& pl = plan(x.shape(), g);
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
    cpu::require_shape("conv2d", "dy", dy, {g.n, g.oh, g.ow, g.oc});
    cpu::require_shape("conv2d", "dw", dw, w.shape());
    if (p_.bias) cpu::require_shape("conv2d", "db", db, {g.oc});
    if (dx.defined()) cpu::require_shape("conv2d", "dx", dx, x.shape());
    if (g.n == 0 || g.oh == 0 || g.ow == 0) {  // no output: every gradient is zero
      std::memset(dw.data(), 0, dw.bytes());
      if (p_.bias) std::memset(db.data(), 0, db.bytes());
      if (dx.defined()) std::memset(dx.data(), 0, dx.bytes());
      return;
    }
    ConvPlan& pl = plan(x.shape(), g);
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
  ConvGeometry check(const Tensor& x, const Tensor& w, const Tensor& b, bool need_bias) const {
    cpu::require_rank("conv2d", "x", x, 4);
    ConvGeometry g = conv2d_geometry(x.shape(), p_);
    cpu::require_shape("conv2d", "w", w, conv2d_weight_shape(g.ic, p_));
    if (need_bias) cpu::require_shape("conv2d", "b", b, {g.oc});
    return g;
  }

  ConvPlan& plan(const Shape& xs, const ConvGeometry& g) {
    return cache_.get(xs.dims(), [&] { return make_plan(g); });
  }

  ConvPlan make_plan(const ConvGeometry& g) {
    ConvPlan pl;
    pl.g = g;
    pl.src_md = cpu::nhwc_md({g.n, g.ih, g.iw, g.ic});
    pl.dst_md = cpu::nhwc_md({g.n, g.oh, g.ow, g.oc});
    pl.bias_md = memory::desc({g.oc}, dt::f32, tag::a);
    memory::dims wdims = {g.oc, g.ic, p_.kh, p_.kw};
    pl.user_w_md = memory::desc(wdims, dt::f32, tag::hwio);
    memory::desc any_w(wdims, dt::f32, tag::any);
    pl.strides = {p_.sh, p_.sw};
    pl.dilates = {p_.dh - 1, p_.dw - 1};
    pl.pad_l = {g.pt, g.pl};
    pl.pad_r = {g.pb, g.pr};
    auto alg = dnnl::algorithm::convolution_direct;
    auto d = p_.bias
                 ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, pl.src_md, any_w, pl.bias_md,
                                                   pl.dst_md, pl.strides, pl.dilates, pl.pad_l, pl.pad_r)
                 : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, pl.src_md, any_w, pl.dst_md,
                                                   pl.strides, pl.dilates, pl.pad_l, pl.pad_r);
    pl.fwd_pd = dnnl::convolution_forward::primitive_desc(d, cpu::user_scratchpad_attr(), c_.engine());
    pl.fwd = dnnl::convolution_forward(pl.fwd_pd);
    make_reorder(c_, pl.user_w_md, pl.fwd_pd.weights_desc(), pl.w_to_fwd, pl.w_fwd, pl.fwd_pd.weights_desc());
    return pl;
  }

  void make_bwd_data(ConvPlan& pl) {
    memory::desc any_w({pl.g.oc, pl.g.ic, p_.kh, p_.kw}, dt::f32, tag::any);
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, pl.src_md, any_w, pl.dst_md,
                                            pl.strides, pl.dilates, pl.pad_l, pl.pad_r);
    pl.bwd_data_pd =
        dnnl::convolution_backward_data::primitive_desc(d, cpu::user_scratchpad_attr(), c_.engine(), pl.fwd_pd);
    pl.bwd_data = dnnl::convolution_backward_data(pl.bwd_data_pd);
    make_reorder(c_, pl.user_w_md, pl.bwd_data_pd.weights_desc(), pl.w_to_bwd, pl.w_bwd, pl.bwd_data_pd.weights_desc());
    pl.have_bwd_data = true;
  }

  void make_bwd_weights(ConvPlan& pl) {
    memory::desc any_w({pl.g.oc, pl.g.ic, p_.kh, p_.kw}, dt::f32, tag::any);
    auto alg = dnnl::algorithm::convolution_direct;
    auto d = p_.bias ? dnnl::convolution_backward_weights::desc(alg, pl.src_md, any_w, pl.bias_md, pl.dst_md,
                                                                pl.strides, pl.dilates, pl.pad_l, pl.pad_r)
                     : dnnl::convolution_backward_weights::desc(alg, pl.src_md, any_w, pl.dst_md, pl.strides,
                                                                pl.dilates, pl.pad_l, pl.pad_r);
    pl.bwd_w_pd =
        dnnl::convolution_backward_weights::primitive_desc(d, cpu::user_scratchpad_attr(), c_.engine(), pl.fwd_pd);
    pl.bwd_w = dnnl::convolution_backward_weights(pl.bwd_w_pd);
    make_reorder(c_, pl.bwd_w_pd.diff_weights_desc(), pl.user_w_md, pl.dw_to_user, pl.dw_buf,
                 pl.bwd_w_pd.diff_weights_desc());
    pl.have_bwd_weights = true;
  }

  CpuContext& c_;
  Conv2dParams p_;
  cpu::ShapeCache<ConvPlan> cache_;
};

static RegisterKernel<Conv2dKernel, CpuConv2d> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
