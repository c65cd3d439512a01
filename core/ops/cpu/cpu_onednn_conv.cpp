// oneDNN convolution shared by the CPU conv2d and depthwise conv2d kernels (see cpu_onednn_conv.h).
#include "core/ops/cpu/cpu_onednn_conv.h"

#include <cstring>
#include <unordered_map>

namespace trainer::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// A reorder from `from` to `to` and a buffer for the primitive's layout `buf_md`, unless the two
// layouts agree (then the user's buffer is used directly and `r` stays empty).
void make_reorder(CpuContext& c, const memory::desc& from, const memory::desc& to, dnnl::reorder& r, Tensor& buf,
                  const memory::desc& buf_md) {
  if (from == to) return;
  r = dnnl::reorder(dnnl::reorder::primitive_desc(c.engine(), from, c.engine(), to));
  buf = c.empty({int64_t(buf_md.get_size())}, DType::U8);
}

bool empty_output(const ConvGeometry& g) { return g.n == 0 || g.oh == 0 || g.ow == 0 || g.oc == 0; }

}  // namespace

void OnednnConv::forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  if (empty_output(g)) return;
  Plan& pl = plan(x.shape(), g);
  auto& eng = c_.engine();
  memory wmem = mem(pl.user_w_md, eng, w.data());
  if (pl.w_to_fwd) {
    memory wf(pl.fwd_pd.weights_desc(), eng, pl.w_fwd.data());
    pl.w_to_fwd.execute(c_.stream(), wmem, wf);
    wmem = wf;
  }
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, mem(pl.src_md, eng, x.data())},
                                          {DNNL_ARG_WEIGHTS, wmem},
                                          {DNNL_ARG_DST, mem(pl.dst_md, eng, y.data())},
                                          {DNNL_ARG_SCRATCHPAD, scratchpad(pl.fwd_pd, eng)}};
  if (cfg_.bias) args[DNNL_ARG_BIAS] = mem(pl.bias_md, eng, b.data());
  pl.fwd.execute(c_.stream(), args);
  c_.stream().wait();
}

void OnednnConv::backward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                          Tensor& dw, Tensor& db) {
  if (empty_output(g)) {  // no output: every gradient is zero
    std::memset(dw.data(), 0, dw.bytes());
    if (cfg_.bias) std::memset(db.data(), 0, db.bytes());
    if (dx.defined()) std::memset(dx.data(), 0, dx.bytes());
    return;
  }
  Plan& pl = plan(x.shape(), g);
  auto& eng = c_.engine();
  auto& s = c_.stream();
  memory src = mem(pl.src_md, eng, x.data());
  memory ddst = mem(pl.dst_md, eng, dy.data());

  if (dx.defined()) {
    if (!pl.have_bwd_data) make_bwd_data(pl);
    memory wmem = mem(pl.user_w_md, eng, w.data());
    if (pl.w_to_bwd) {
      memory wb(pl.bwd_data_pd.weights_desc(), eng, pl.w_bwd.data());
      pl.w_to_bwd.execute(s, wmem, wb);
      wmem = wb;
    }
    pl.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, ddst},
                            {DNNL_ARG_WEIGHTS, wmem},
                            {DNNL_ARG_DIFF_SRC, mem(pl.src_md, eng, dx.data())},
                            {DNNL_ARG_SCRATCHPAD, scratchpad(pl.bwd_data_pd, eng)}});
  }

  if (!pl.have_bwd_weights) make_bwd_weights(pl);
  memory user_dw = mem(pl.user_w_md, eng, dw.data());
  memory dwmem = pl.dw_to_user ? memory(pl.bwd_w_pd.diff_weights_desc(), eng, pl.dw_buf.data()) : user_dw;
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src},
                                          {DNNL_ARG_DIFF_DST, ddst},
                                          {DNNL_ARG_DIFF_WEIGHTS, dwmem},
                                          {DNNL_ARG_SCRATCHPAD, scratchpad(pl.bwd_w_pd, eng)}};
  if (cfg_.bias) args[DNNL_ARG_DIFF_BIAS] = mem(pl.bias_md, eng, db.data());
  pl.bwd_w.execute(s, args);
  if (pl.dw_to_user) pl.dw_to_user.execute(s, dwmem, user_dw);
  s.wait();
}

OnednnConv::Plan& OnednnConv::plan(const Shape& xs, const ConvGeometry& g) {
  return cache_.get(xs.dims(), [&] { return make_plan(g); });
}

OnednnConv::Plan OnednnConv::make_plan(const ConvGeometry& g) {
  Plan pl;
  pl.g = g;
  pl.src_md = nhwc_md({g.n, g.ih, g.iw, g.ic});
  pl.dst_md = nhwc_md({g.n, g.oh, g.ow, g.oc});
  pl.bias_md = memory::desc({g.oc}, dt::f32, tag::a);
  pl.wdims = cfg_.depthwise ? memory::dims{g.ic, g.oc / g.ic, 1, cfg_.kh, cfg_.kw}
                            : memory::dims{g.oc, g.ic, cfg_.kh, cfg_.kw};
  pl.user_w_md = memory::desc(pl.wdims, dt::f32, cfg_.user_w_tag);
  memory::desc any_w(pl.wdims, dt::f32, tag::any);
  pl.strides = {cfg_.sh, cfg_.sw};
  pl.dilates = {cfg_.dh - 1, cfg_.dw - 1};
  pl.pad_l = {g.pt, g.pl};
  pl.pad_r = {g.pb, g.pr};
  auto alg = dnnl::algorithm::convolution_direct;
  auto pk = dnnl::prop_kind::forward_training;
  auto d = cfg_.bias ? dnnl::convolution_forward::desc(pk, alg, pl.src_md, any_w, pl.bias_md, pl.dst_md, pl.strides,
                                                       pl.dilates, pl.pad_l, pl.pad_r)
                     : dnnl::convolution_forward::desc(pk, alg, pl.src_md, any_w, pl.dst_md, pl.strides, pl.dilates,
                                                       pl.pad_l, pl.pad_r);
  pl.fwd_pd = dnnl::convolution_forward::primitive_desc(d, user_scratchpad_attr(), c_.engine());
  pl.fwd = dnnl::convolution_forward(pl.fwd_pd);
  make_reorder(c_, pl.user_w_md, pl.fwd_pd.weights_desc(), pl.w_to_fwd, pl.w_fwd, pl.fwd_pd.weights_desc());
  return pl;
}

void OnednnConv::make_bwd_data(Plan& pl) {
  memory::desc any_w(pl.wdims, dt::f32, tag::any);
  dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, pl.src_md, any_w, pl.dst_md, pl.strides,
                                          pl.dilates, pl.pad_l, pl.pad_r);
  pl.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(d, user_scratchpad_attr(), c_.engine(), pl.fwd_pd);
  pl.bwd_data = dnnl::convolution_backward_data(pl.bwd_data_pd);
  make_reorder(c_, pl.user_w_md, pl.bwd_data_pd.weights_desc(), pl.w_to_bwd, pl.w_bwd, pl.bwd_data_pd.weights_desc());
  pl.have_bwd_data = true;
}

void OnednnConv::make_bwd_weights(Plan& pl) {
  memory::desc any_w(pl.wdims, dt::f32, tag::any);
  auto alg = dnnl::algorithm::convolution_direct;
  auto d = cfg_.bias ? dnnl::convolution_backward_weights::desc(alg, pl.src_md, any_w, pl.bias_md, pl.dst_md,
                                                                pl.strides, pl.dilates, pl.pad_l, pl.pad_r)
                     : dnnl::convolution_backward_weights::desc(alg, pl.src_md, any_w, pl.dst_md, pl.strides,
                                                                pl.dilates, pl.pad_l, pl.pad_r);
  pl.bwd_w_pd = dnnl::convolution_backward_weights::primitive_desc(d, user_scratchpad_attr(), c_.engine(), pl.fwd_pd);
  pl.bwd_w = dnnl::convolution_backward_weights(pl.bwd_w_pd);
  make_reorder(c_, pl.bwd_w_pd.diff_weights_desc(), pl.user_w_md, pl.dw_to_user, pl.dw_buf,
               pl.bwd_w_pd.diff_weights_desc());
  pl.have_bwd_weights = true;
}

}  // namespace trainer::cpu
