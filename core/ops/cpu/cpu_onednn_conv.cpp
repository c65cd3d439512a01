// oneDNN convolution shared by the CPU conv2d and depthwise conv2d kernels (see cpu_onednn_conv.h).
#include "core/ops/cpu/cpu_onednn_conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "core/ops/cpu/cpu_bf16.h"

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

// Whether a tap of the window reads only padding for every output position, in either axis (an
// input one pixel wide under 'same' padding with a 3-wide window: its outer columns).
bool dead_tap(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t pad) {
  for (int64_t a = 0; a < k; ++a) {
    bool live = false;
    for (int64_t o = 0; o < out && !live; ++o) live = o * s - pad + a * d >= 0 && o * s - pad + a * d < in;
    if (!live) return true;
  }
  return false;
}

bool empty_output(const ConvGeometry& g) { return g.n == 0 || g.oh == 0 || g.ow == 0 || g.oc == 0; }

// f32 1x1 convolutions at stride 1 without padding run as GEMMs (OnednnConv::Plan::gemm_1x1) where
// the context's conv_1x1 fast path is on. Measured on a 2-core Zen 4, 2 threads, caches flushed
// before each call (as a step finds its tensors), forward ms oneDNN / sgemm: 96->32 on 32x32x64
// 3.16 / 2.39, 64->32 1.86 / 1.30, 160->112 on 15x15x64 2.94 / 2.80, 160->48 1.40 / 1.27, 336->176
// on 7x7x64 1.85 / 1.72; the input gradient 15.2 / 14.2 ms over the eight shapes (2.70 / 2.11 at
// 96->32; from 7% slower at 64->32 to 12% faster at 160->48). TRAINER_FAST_PATHS=-conv_1x1 (or the
// older TRAINER_CONV_1X1=onednn) keeps oneDNN's kernels, the reference the GEMMs are tested against.

}  // namespace

bool OnednnConv::forward_widened(const std::string& impl, const OnednnConvConfig& cfg) {
  const char* env = std::getenv("TRAINER_CONV_BF16_FWD");
  if (env && std::string(env) == "f32") return true;
  const bool amx = impl.find("amx") != std::string::npos;
  return amx && (cfg.sh > cfg.kh || cfg.sw > cfg.kw);
}

void OnednnConv::forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  if (empty_output(g)) return;
  Plan& pl = plan(x, g);
  if (pl.gemm_1x1) {
    cpu::linear_forward_f32("conv2d", g.n * g.ih * g.iw, g.ic, g.oc, x.f32(), w.f32(), cfg_.bias ? b.f32() : nullptr,
                            y.f32());
    return;
  }
  auto& eng = c_.engine();
  if (pl.widen_fwd) {  // f32 from x widened, rounded into y once (dy32 serves as y's f32 buffer)
    widen_bf16(x.as<bf16>(), pl.x32.f32(), x.numel());
    memory ww = weights(pl.user_w_md, w, pl.w_to_wide, pl.w_wide, pl.wide_fwd_pd.weights_desc());
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, mem(pl.src32_md, eng, pl.x32.data())},
                                            {DNNL_ARG_WEIGHTS, ww},
                                            {DNNL_ARG_DST, mem(pl.dst32_md, eng, pl.dy32.data())},
                                            {DNNL_ARG_SCRATCHPAD, scratchpad(pl.wide_fwd_pd, eng)}};
    if (cfg_.bias) args[DNNL_ARG_BIAS] = mem(pl.bias_md, eng, b.data());
    pl.wide_fwd.execute(c_.stream(), args);
    c_.stream().wait();
    round_to_bf16(pl.dy32.f32(), y.as<bf16>(), y.numel());
    return;
  }
  memory wmem = weights(pl.user_w_md, w, pl.w_to_fwd, pl.w_fwd, pl.fwd_pd.weights_desc());
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, mem(pl.src_md, eng, x.data())},
                                          {DNNL_ARG_WEIGHTS, wmem},
                                          {DNNL_ARG_DST, mem(pl.dst_md, eng, y.data())},
                                          {DNNL_ARG_SCRATCHPAD, scratchpad(pl.fwd_pd, eng)}};
  if (cfg_.bias) args[DNNL_ARG_BIAS] = mem(pl.bias_md, eng, b.data());
  pl.fwd.execute(c_.stream(), args);
  c_.stream().wait();
}

void OnednnConv::backward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                          Tensor& dw, Tensor& db, bool add_dx) {
  if (add_dx && (cfg_.depthwise || cfg_.kh != 1 || cfg_.kw != 1 || cfg_.sh != 1 || cfg_.sw != 1))
    throw std::logic_error("OnednnConv: adding into dx takes a plain 1x1 convolution at stride 1");
  if (empty_output(g)) {  // no output: every gradient is zero
    if (dw.defined()) std::memset(dw.data(), 0, dw.bytes());
    if (cfg_.bias) std::memset(db.data(), 0, db.bytes());
    if (dx.defined() && !add_dx) std::memset(dx.data(), 0, dx.bytes());
    return;
  }
  Plan& pl = plan(x, g);
  if (dx.defined() && !add_dx && !pl.have_bwd_data && !pl.gemm_1x1) make_bwd_data(pl, g);
  if ((add_dx || (dx.defined() && pl.dx_by_add)) && !pl.have_bwd_add && !pl.gemm_1x1) make_bwd_add(pl);
  if (dw.defined() && !pl.have_bwd_weights) make_bwd_weights(pl, g);
  auto& eng = c_.engine();
  auto& s = c_.stream();
  memory ddst = mem(pl.dst_md, eng, dy.data());
  bool dy_wide = false;  // pl.dy32 holds dy widened (by the widened backward data)

  if (pl.gemm_1x1 && dx.defined()) {  // dx (+)= dy [rows, OC] · wᵀ, w [IC, OC]
    cpu::sgemm("conv2d", 'N', 'T', g.n * g.ih * g.iw, g.ic, g.oc, dy.f32(), g.oc, w.f32(), g.oc, add_dx ? 1.0f : 0.0f,
               dx.f32(), g.ic);
  } else if (add_dx || (dx.defined() && pl.dx_by_add)) {
    if (!add_dx) std::memset(dx.data(), 0, dx.bytes());  // dx = 0 + conv: the sum rounds the same value once
    memory wt = weights(pl.add_user_w_md, w, pl.w_to_add, pl.w_add, pl.bwd_add_pd.weights_desc());
    pl.bwd_add.execute(s, {{DNNL_ARG_SRC, ddst},
                           {DNNL_ARG_WEIGHTS, wt},
                           {DNNL_ARG_DST, mem(pl.src_md, eng, dx.data())},
                           {DNNL_ARG_SCRATCHPAD, scratchpad(pl.bwd_add_pd, eng)}});
  } else if (dx.defined() && pl.widen_bwd_data) {  // f32 from dy widened, rounded into dx once
    widen_bf16(dy.as<bf16>(), pl.dy32.f32(), dy.numel());
    dy_wide = true;
    memory wb = weights(pl.user_w_md, w, pl.w_to_bwd, pl.w_bwd, pl.bwd_data_pd.weights_desc());
    pl.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, mem(pl.dst32_md, eng, pl.dy32.data())},
                            {DNNL_ARG_WEIGHTS, wb},
                            {DNNL_ARG_DIFF_SRC, mem(pl.src32_md, eng, pl.dx32.data())},
                            {DNNL_ARG_SCRATCHPAD, scratchpad(pl.bwd_data_pd, eng)}});
    s.wait();
    round_to_bf16(pl.dx32.f32(), dx.as<bf16>(), dx.numel());
  } else if (dx.defined()) {
    memory wb = weights(pl.user_w_md, w, pl.w_to_bwd, pl.w_bwd, pl.bwd_data_pd.weights_desc());
    pl.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, ddst},
                            {DNNL_ARG_WEIGHTS, wb},
                            {DNNL_ARG_DIFF_SRC, mem(pl.src_md, eng, dx.data())},
                            {DNNL_ARG_SCRATCHPAD, scratchpad(pl.bwd_data_pd, eng)}});
  }

  if (!dw.defined()) {  // the input gradient alone (Conv2dKernel::backward_data)
    s.wait();
    return;
  }
  if (pl.own_bwd_w) {
    s.wait();  // dx's primitive, before the kernel's own OpenMP team
    pl.own_bwd_w->run(x, dy, dw, cfg_.bias ? &db : nullptr);
    return;
  }
  if (pl.sampled_1x1) {
    s.wait();
    sampled_1x1_wgrad(pl, g, x, dy, dw, db);
    return;
  }
  memory user_dw = mem(pl.user_w_md, eng, dw.data());
  memory dwmem = pl.dw_to_user ? memory(pl.bwd_w_pd.diff_weights_desc(), eng, pl.dw_buf.data()) : user_dw;
  memory src = mem(pl.src_md, eng, x.data());
  if (pl.widen_bwd_w) {
    s.wait();  // dx's primitive reads dy
    widen_bf16(x.as<bf16>(), pl.x32.f32(), x.numel());
    if (!dy_wide) widen_bf16(dy.as<bf16>(), pl.dy32.f32(), dy.numel());
    src = mem(pl.src32_md, eng, pl.x32.data());
    ddst = mem(pl.dst32_md, eng, pl.dy32.data());
  }
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src},
                                          {DNNL_ARG_DIFF_DST, ddst},
                                          {DNNL_ARG_DIFF_WEIGHTS, dwmem},
                                          {DNNL_ARG_SCRATCHPAD, scratchpad(pl.bwd_w_pd, eng)}};
  if (cfg_.bias) args[DNNL_ARG_DIFF_BIAS] = mem(pl.bias_md, eng, db.data());
  pl.bwd_w.execute(s, args);
  if (pl.dw_to_user) pl.dw_to_user.execute(s, dwmem, user_dw);
  s.wait();
}

// The weights as a primitive takes them (layout `md`): the user's buffer, or its reorder (which
// in bf16 also converts) into the plan's `buf`, queued on the stream.
memory OnednnConv::weights(const memory::desc& user_md, const Tensor& w, const dnnl::reorder& r, Tensor& buf,
                           const memory::desc& md) {
  memory user = mem(user_md, c_.engine(), w.data());
  if (!r) return user;
  memory out(md, c_.engine(), buf.data());
  r.execute(c_.stream(), user, out);
  return out;
}

// Keyed by x's shape and type: the graph picks each layer's activation type, so one kernel may
// see f32 and bf16 inputs of the same shape.
OnednnConv::Plan& OnednnConv::plan(const Tensor& x, const ConvGeometry& g) {
  refuse_f16(cfg_.depthwise ? "depthwise_conv2d" : "conv2d", "x", x);  // oneDNN's CPU convolutions: f32 or bf16
  std::vector<int64_t> key = x.shape().dims();
  key.push_back(int64_t(x.dtype()));
  return cache_.get(key, [&] { return make_plan(g, x.dtype()); });
}

// Descriptors use `any` weights (the primitive picks its blocked layout, reordered to once per
// call, in the compute type) and the caller's NHWC activations in the compute type; bias, dw and
// db stay f32 (oneDNN's bf16 convolutions accumulate in f32, take an f32 bias and may write f32
// diff weights and bias).
OnednnConv::Plan OnednnConv::make_plan(const ConvGeometry& g, DType compute) {
  Plan pl;
  const dt cdt = compute == DType::BF16 ? dt::bf16 : dt::f32;
  pl.src_md = nhwc_md({g.n, g.ih, g.iw, g.ic}, cdt);
  pl.dst_md = nhwc_md({g.n, g.oh, g.ow, g.oc}, cdt);
  pl.bias_md = memory::desc({g.oc}, dt::f32, tag::a);
  pl.wdims = cfg_.depthwise ? memory::dims{g.ic, g.oc / g.ic, 1, cfg_.kh, cfg_.kw}
                            : memory::dims{g.oc, g.ic, cfg_.kh, cfg_.kw};
  pl.user_w_md = memory::desc(pl.wdims, dt::f32, cfg_.user_w_tag);
  memory::desc any_w(pl.wdims, cdt, tag::any);
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
  const bool window_1x1 = cfg_.kh == 1 && cfg_.kw == 1 && cfg_.sh == 1 && cfg_.sw == 1;
  const bool unpadded = g.pt == 0 && g.pb == 0 && g.pl == 0 && g.pr == 0;
  pl.gemm_1x1 = compute == DType::F32 && !cfg_.depthwise && cfg_.user_w_tag == tag::hwio && window_1x1 && unpadded &&
                c_.fast_paths().has(FastPath::Conv1x1);
  if (pl.gemm_1x1) return pl;  // the backward weights' oneDNN primitive, where used, takes fwd_pd as its hint
  if (compute == DType::BF16 && forward_widened(pl.fwd_pd.impl_info_str(), cfg_)) {
    pl.widen_fwd = true;
    make_wide(pl, g);
    pl.wide_fwd = dnnl::convolution_forward(pl.wide_fwd_pd);
    make_reorder(c_, pl.user_w_md, pl.wide_fwd_pd.weights_desc(), pl.w_to_wide, pl.w_wide,
                 pl.wide_fwd_pd.weights_desc());
    return pl;  // fwd_pd stays: the backward primitives take it as their hint
  }
  pl.fwd = dnnl::convolution_forward(pl.fwd_pd);
  make_reorder(c_, pl.user_w_md, pl.fwd_pd.weights_desc(), pl.w_to_fwd, pl.w_fwd, pl.fwd_pd.weights_desc());
  return pl;
}

void OnednnConv::make_bwd_data(Plan& pl, const ConvGeometry& g) {
  // oneDNN 2.6.3 (Debian 12), bf16 on AVX512_BF16: its 1x1 backward-data kernel
  // (jit_bf16_1x1:avx512_core_bf16) is wrong for an odd number of output channels (the reduction
  // axis, which it takes in pairs): at stride 1 nearly every element of dx off by up to the size of
  // the values, at 1 and 2 threads, for 1, 3, 5, 17, 31, 33, 255 or 257 filters over 1-139 input
  // channels, right for every even count tried (2-130); at stride 3 (15 -> 39 channels) a tenth of
  // dx. Found by tests/unit/ops/fastpath_conv_test.cpp and fuzz_conv_test.cpp on a Sapphire Rapids
  // (2026-11-29), reproduced with oneDNN alone. At stride 1 those convolutions take the bwd_add
  // primitive (a forward 1x1 convolution of dy with the transposed weights) onto a zeroed dx;
  // strided ones oneDNN's f32 kernel on dy widened to f32 (exactly), with the f32 weights, dx
  // rounded to bf16 once.
  const bool plain_1x1 = !cfg_.depthwise && cfg_.kh == 1 && cfg_.kw == 1;
  const bool unpadded = pl.pad_l == memory::dims{0, 0} && pl.pad_r == memory::dims{0, 0};
  const bool bf16 = pl.src_md.data_type() == dt::bf16;
  pl.have_bwd_data = true;
  if (bf16 && plain_1x1 && pl.wdims[0] % 2 == 1) {
    if (cfg_.sh == 1 && cfg_.sw == 1 && unpadded) {
      pl.dx_by_add = true;
      return;
    }
    pl.widen_bwd_data = true;
    make_wide(pl, g);
    pl.dx32 = c_.empty({g.n * g.ih * g.iw * g.ic});
  }
  const memory::desc& src_md = pl.widen_bwd_data ? pl.src32_md : pl.src_md;
  const memory::desc& dst_md = pl.widen_bwd_data ? pl.dst32_md : pl.dst_md;
  memory::desc any_w(pl.wdims, src_md.data_type(), tag::any);
  dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, src_md, any_w, dst_md, pl.strides,
                                          pl.dilates, pl.pad_l, pl.pad_r);
  pl.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(d, user_scratchpad_attr(), c_.engine(),
                                                                   pl.widen_bwd_data ? pl.wide_fwd_pd : pl.fwd_pd);
  pl.bwd_data = dnnl::convolution_backward_data(pl.bwd_data_pd);
  make_reorder(c_, pl.user_w_md, pl.bwd_data_pd.weights_desc(), pl.w_to_bwd, pl.w_bwd, pl.bwd_data_pd.weights_desc());
}

// The f32 twins of a bf16 plan's activations (widen_bwd_data, widen_bwd_w): descriptors, x's and
// dy's buffers and the f32 forward primitive descriptor the backward ones take as their hint (dx's
// buffer is make_bwd_data's). Made once.
void OnednnConv::make_wide(Plan& pl, const ConvGeometry& g) {
  if (pl.x32.defined()) return;
  pl.src32_md = nhwc_md({g.n, g.ih, g.iw, g.ic}, dt::f32);
  pl.dst32_md = nhwc_md({g.n, g.oh, g.ow, g.oc}, dt::f32);
  pl.x32 = c_.empty({g.n * g.ih * g.iw * g.ic});
  pl.dy32 = c_.empty({g.n * g.oh * g.ow * g.oc});
  memory::desc any_w(pl.wdims, dt::f32, tag::any);
  auto pk = dnnl::prop_kind::forward_training;
  auto alg = dnnl::algorithm::convolution_direct;
  auto fd = cfg_.bias ? dnnl::convolution_forward::desc(pk, alg, pl.src32_md, any_w, pl.bias_md, pl.dst32_md,
                                                        pl.strides, pl.dilates, pl.pad_l, pl.pad_r)
                      : dnnl::convolution_forward::desc(pk, alg, pl.src32_md, any_w, pl.dst32_md, pl.strides,
                                                        pl.dilates, pl.pad_l, pl.pad_r);
  pl.wide_fwd_pd = dnnl::convolution_forward::primitive_desc(fd, user_scratchpad_attr(), c_.engine());
}

// dx += conv1x1(dy, w^T) at stride 1: a forward convolution from dy's OC channels to x's IC with a
// sum post-op (dst = conv + dst, accumulated in f32, rounded once). Its weights {IC, OC, 1, 1} are
// the user's HWIO [1, 1, IC, OC] buffer as it is (oihw), reordered like the others.
void OnednnConv::make_bwd_add(Plan& pl) {
  const memory::dims wt = {pl.wdims[1], pl.wdims[0], 1, 1};
  pl.add_user_w_md = memory::desc(wt, dt::f32, tag::oihw);
  memory::desc any_w(wt, pl.src_md.data_type(), tag::any);
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, pl.dst_md,
                                    any_w, pl.src_md, {1, 1}, {0, 0}, {0, 0}, {0, 0});
  dnnl::post_ops po;
  po.append_sum(1.0f);
  dnnl::primitive_attr attr = user_scratchpad_attr();
  attr.set_post_ops(po);
  pl.bwd_add_pd = dnnl::convolution_forward::primitive_desc(d, attr, c_.engine());
  pl.bwd_add = dnnl::convolution_forward(pl.bwd_add_pd);
  const memory::desc& wmd = pl.bwd_add_pd.weights_desc();
  make_reorder(c_, pl.add_user_w_md, wmd, pl.w_to_add, pl.w_add, wmd);
  pl.have_bwd_add = true;
}

void OnednnConv::make_bwd_weights(Plan& pl, const ConvGeometry& g) {
  const DType t = pl.src_md.data_type() == dt::bf16 ? DType::BF16 : DType::F32;
  const ConvWgrad::Window w{int(cfg_.kh), int(cfg_.kw), int(cfg_.sh), int(cfg_.sw), int(cfg_.dh), int(cfg_.dw)};
  const bool ours = c_.fast_paths().has(FastPath::ConvWgrad);  // off: oneDNN's, the reference
  if (ours && !cfg_.depthwise && ConvWgrad::available(t) && ConvWgrad::preferred(t, g, w)) {
    pl.own_bwd_w = std::make_unique<ConvWgrad>(c_, g, w, t);
    pl.have_bwd_weights = true;
    return;
  }
  // oneDNN 2.7's 1x1 backward-weights kernels (jit_1x1) write past their "reduce to unit stride"
  // workspace for a strided window over NHWC input with fewer input channels than their block (8
  // on AVX2, 16 on AVX-512): wrong weight gradients in about half the calls, hangs and crashes
  // (uxlfoundation/oneDNN#6035). Found here on AVX2 by tests/unit/ops/fastpath_conv_test.cpp, which
  // checks the reference paths against float64 on random windows too. Those windows take the rows
  // they read and one GEMM instead.
  const bool unpadded = g.pt == 0 && g.pb == 0 && g.pl == 0 && g.pr == 0;  // always, for a 1x1 window
  if (!cfg_.depthwise && cfg_.kh == 1 && cfg_.kw == 1 && (cfg_.sh > 1 || cfg_.sw > 1) && g.ic < 16 && unpadded) {
    const int64_t rows = g.n * g.oh * g.ow;
    pl.sampled = c_.empty({rows * (g.ic + (t == DType::BF16 ? g.oc : 0))});
    pl.sampled_1x1 = true;
    pl.have_bwd_weights = true;
    return;
  }
  // oneDNN 2.6.3's bf16 backward-weights kernels (jit_bf16:avx512_core_bf16, and the depthwise
  // one) return garbage (up to 1e75, or NaN: memory they never wrote) for some windows: an input one
  // pixel wide under 'same' padding (kernel columns that see only padding), a dilated 3x1 window
  // with 3 filters; 7 of 300 random plain windows of fastpath_conv_test and 2 depthwise ones of 2330
  // of fuzz_conv_test (2026-11-29, Sapphire Rapids); its f32 kernels had none in 5,000. So in bf16
  // x and dy are widened to f32, exactly, and the f32 primitive sums the same products (exact in
  // f32) in f32, as the bf16 kernels do. Plain convolutions take this only on the reference path
  // (or without AVX512_BF16): ConvWgrad is their fast path. Depthwise ones, whose bf16 kernel is
  // the production path (MobileNetV2's depthwise backward took 20 ms more per step widened), only
  // where a tap of the window sees nothing but padding, as in both depthwise windows found.
  if (t == DType::BF16 && (!cfg_.depthwise || dead_tap(g.ih, g.oh, cfg_.kh, cfg_.sh, cfg_.dh, g.pt) ||
                              dead_tap(g.iw, g.ow, cfg_.kw, cfg_.sw, cfg_.dw, g.pl))) {
    pl.widen_bwd_w = true;
    make_wide(pl, g);
  }
  const memory::desc& src_md = pl.widen_bwd_w ? pl.src32_md : pl.src_md;
  const memory::desc& dst_md = pl.widen_bwd_w ? pl.dst32_md : pl.dst_md;
  const dnnl::convolution_forward::primitive_desc& hint = pl.widen_bwd_w ? pl.wide_fwd_pd : pl.fwd_pd;
  memory::desc any_w(pl.wdims, dt::f32, tag::any);  // f32 gradients in either precision
  auto alg = dnnl::algorithm::convolution_direct;
  auto d = cfg_.bias ? dnnl::convolution_backward_weights::desc(alg, src_md, any_w, pl.bias_md, dst_md, pl.strides,
                                                                pl.dilates, pl.pad_l, pl.pad_r)
                     : dnnl::convolution_backward_weights::desc(alg, src_md, any_w, dst_md, pl.strides, pl.dilates,
                                                                pl.pad_l, pl.pad_r);
  pl.bwd_w_pd = dnnl::convolution_backward_weights::primitive_desc(d, user_scratchpad_attr(), c_.engine(), hint);
  pl.bwd_w = dnnl::convolution_backward_weights(pl.bwd_w_pd);
  make_reorder(c_, pl.bwd_w_pd.diff_weights_desc(), pl.user_w_md, pl.dw_to_user, pl.dw_buf,
               pl.bwd_w_pd.diff_weights_desc());
  pl.have_bwd_weights = true;
}

// dw [IC, OC] = Xᵀ·DY over the R = N·OH·OW output positions, X the input rows a strided 1x1 window
// reads (unpadded: Keras' 'same' pads a 1x1 window by nothing), and db = Σ DY over the rows in
// order; in f32 (bf16 values widen exactly), one sgemm.
void OnednnConv::sampled_1x1_wgrad(Plan& pl, const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw,
                                   Tensor& db) {
  const int64_t rows = g.n * g.oh * g.ow;
  float* xs = pl.sampled.f32();
  float* dys = x.dtype() == DType::BF16 ? xs + rows * g.ic : nullptr;
  const int64_t sh = cfg_.sh, sw = cfg_.sw;
  dispatch_float("conv2d", "x", x, [&](auto type) {
    using T = decltype(type);
    const T* xp = x.as<T>();
    const T* dyp = dy.as<T>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r / (g.oh * g.ow), oh = r / g.ow % g.oh, ow = r % g.ow;
      const T* src = xp + ((n * g.ih + oh * sh) * g.iw + ow * sw) * g.ic;
      for (int64_t c = 0; c < g.ic; ++c) xs[r * g.ic + c] = to_f32(src[c]);
      if (dys)
        for (int64_t o = 0; o < g.oc; ++o) dys[r * g.oc + o] = to_f32(dyp[r * g.oc + o]);
    }
  });
  const float* d = dys ? dys : dy.f32();
  sgemm("conv2d", 'T', 'N', g.ic, g.oc, rows, xs, g.ic, d, g.oc, 0.0f, dw.f32(), g.oc);
  if (!cfg_.bias) return;
  float* b = db.f32();
  std::fill(b, b + g.oc, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < g.oc; ++o) b[o] += d[r * g.oc + o];
}

}  // namespace trainer::cpu
