// ONNX export of conv2d and depthwise_conv2d: Conv on NCHW with OIHW weights (depthwise: group = C),
// Keras "same" padding as explicit pads, a following batch norm folded into weights and bias; conv1d
// as a one-row Conv between Transposes; separable_conv2d as a grouped Conv and a 1x1 one;
// conv2d_transpose as ConvTranspose.
#include <fmt/format.h>

#include "core/export/layers/one_row.h"
#include "core/export/registry.h"
#include "core/ops/window.h"

namespace trainer::onnx_export {
namespace {

// out[o][i][y][x] from the trainer's kernel, per output channel o scaled by a folded batch norm.
struct ConvWeights {
  std::vector<int64_t> dims;  // O, I, KH, KW
  std::vector<float> w, b;    // b empty: no bias
  std::string doc;
};

void apply_fold(ExportContext& ctx, size_t i, ConvWeights& cw) {
  const ChannelAffine* a = ctx.folded_into(i);
  if (!a) return;
  const int64_t out = cw.dims[0], per = int64_t(cw.w.size()) / out;
  if (cw.b.empty()) cw.b.assign(size_t(out), 0.0f);
  for (int64_t o = 0; o < out; ++o) {
    const double s = a->scale[size_t(o)];
    for (int64_t k = 0; k < per; ++k) cw.w[size_t(o * per + k)] = float(double(cw.w[size_t(o * per + k)]) * s);
    cw.b[size_t(o)] = float(double(cw.b[size_t(o)]) * s + a->shift[size_t(o)]);
  }
  cw.doc += fmt::format("; batch norm '{}' folded in (weights x gamma / sqrt(moving_variance + epsilon))", a->batchnorm);
}

// The trainer's kernel k as ONNX's: conv2d [KH, KW, C, F] (HWIO) as [F, C, KH, KW] (OIHW);
// depthwise [KH, KW, C, M] as [C*M, 1, KH, KW] (Keras's output channel c*M + m of group c).
ConvWeights conv_weights(const std::vector<float>& k, int64_t kh, int64_t kw, int64_t cin, int64_t per_in, bool depthwise) {
  ConvWeights cw;
  const int64_t out = depthwise ? cin * per_in : per_in, in = depthwise ? 1 : cin;
  cw.dims = {out, in, kh, kw};
  cw.w.resize(size_t(out * in * kh * kw));
  // trainer: k[((y * KW + x) * C + c) * P + p]. Conv2d: o = p, i = c. Depthwise: o = c * M + m, i = 0.
  for (int64_t y = 0; y < kh; ++y)
    for (int64_t xx = 0; xx < kw; ++xx)
      for (int64_t c = 0; c < cin; ++c)
        for (int64_t p = 0; p < per_in; ++p) {
          const float v = k[size_t(((y * kw + xx) * cin + c) * per_in + p)];
          const int64_t o = depthwise ? c * per_in + p : p, ii = depthwise ? 0 : c;
          cw.w[size_t(((o * in + ii) * kh + y) * kw + xx)] = v;
        }
  cw.doc = depthwise ? "trainer [KH, KW, C, M] as ONNX [C*M, 1, KH, KW]" : "trainer [KH, KW, C, F] (HWIO) as ONNX [F, C, KH, KW] (OIHW)";
  return cw;
}

// A layer's window as describe_window() gave it.
struct Window2d {
  int kh, kw, sh, sw, dh, dw;
  Padding pad;
};
Window2d window_of(const LayerConfig& d) {
  return {int(d.integer("kernel_h")),  int(d.integer("kernel_w")),   int(d.integer("strides_h")),
          int(d.integer("strides_w")), int(d.integer("dilation_h")), int(d.integer("dilation_w")),
          d.text("padding") == "same" ? Padding::Same : Padding::Valid};
}
// The Conv node's window attributes, its pads those of wh (rows) and ww (columns).
void set_window(onnx::NodeProto* n, const Window2d& k, const Window1d& wh, const Window1d& ww) {
  attr_ints(n, "kernel_shape", {k.kh, k.kw});
  attr_ints(n, "strides", {k.sh, k.sw});
  attr_ints(n, "dilations", {k.dh, k.dw});
  attr_ints(n, "pads", {wh.pad_before, ww.pad_before, wh.pad_after, ww.pad_after});
}

void export_conv(ExportContext& ctx, size_t i, bool depthwise) {
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig d = l.describe();
  const Value& x = ctx.input(i, 0);
  const Window2d k = window_of(d);
  const int64_t cin = x.shape[2];
  const std::string kname = depthwise ? "depthwise_kernel" : "kernel";
  const int64_t per_in = depthwise ? d.integer("depth_multiplier") : d.integer("filters");
  const int64_t out = depthwise ? cin * per_in : per_in;
  ConvWeights cw = conv_weights(ctx.param(i, kname), k.kh, k.kw, cin, per_in, depthwise);
  if (d.flag("use_bias")) cw.b = ctx.param(i, "bias");
  apply_fold(ctx, i, cw);
  // A zero_pad2d folded in (pad_fold): its zeros are this Conv's pads.
  auto extra = [&](const char* key) { return d.has(key) ? int(d.integer(key)) : 0; };
  const Window1d wh = window_1d(x.shape[0], k.kh, k.sh, k.dh, k.pad, extra("pad_top"), extra("pad_bottom"));
  const Window1d ww = window_1d(x.shape[1], k.kw, k.sw, k.dw, k.pad, extra("pad_left"), extra("pad_right"));
  std::vector<std::string> inputs{x.name, ctx.add_initializer(ctx.param_entry(i, kname).name, cw.dims, cw.w, cw.doc)};
  if (!cw.b.empty()) {
    const std::string bname = d.flag("use_bias") ? ctx.param_entry(i, "bias").name : l.name() + "/bias";
    inputs.push_back(ctx.add_initializer(bname, {out}, cw.b,
                                         ctx.folded_into(i) ? "bias with the folded batch norm's shift" : ""));
  }
  onnx::NodeProto* n = ctx.add_node("Conv", inputs, {ctx.output_name(i)});
  set_window(n, k, wh, ww);
  attr_int(n, "group", depthwise ? cin : 1);
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter conv({"conv2d"}, [](ExportContext& ctx, size_t i) { export_conv(ctx, i, false); }, true);
const RegisterExporter depthwise({"depthwise_conv2d"}, [](ExportContext& ctx, size_t i) { export_conv(ctx, i, true); },
                                 true);

// conv1d on a sequence [N, T, C] as a 2-D Conv on [N, C, 1, T] (one_row.h): kernel [1, k] (weights
// [F, C, 1, k] from Keras's [k, C, F]) and its pads before and after the steps (causal: all before).
void export_conv1d(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig d = l.describe();
  const Value& x = ctx.input(i, 0);
  const std::string name = l.name();
  const int64_t T = x.shape[0], C = x.shape[1], F = d.integer("filters"), k = d.integer("kernel");
  const int64_t To = ctx.node(i).shape[0];
  const std::vector<float> kern = ctx.param(i, "kernel");  // [k, C, F]
  std::vector<float> w(size_t(F * C * k));
  for (int64_t t = 0; t < k; ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t f = 0; f < F; ++f) w[size_t((f * C + c) * k + t)] = kern[size_t((t * C + c) * F + f)];
  std::vector<std::string> inputs{"", ctx.add_initializer(ctx.param_entry(i, "kernel").name, {F, C, 1, k}, w,
                                                          "trainer [K, C, F] (Keras's Conv1D) as ONNX [F, C, 1, K]")};
  if (d.flag("use_bias")) inputs.push_back(ctx.add_initializer(ctx.param_entry(i, "bias").name, {F}, ctx.param(i, "bias")));
  inputs[0] = sequence_as_row(ctx, name, x.name, T, C);
  const std::string y = ctx.fresh(name + "/conv");
  onnx::NodeProto* n = ctx.add_node("Conv", inputs, {y});
  attr_ints(n, "kernel_shape", {1, k});
  attr_ints(n, "strides", {1, d.integer("strides")});
  attr_ints(n, "dilations", {1, d.integer("dilation")});
  attr_ints(n, "pads", {0, d.integer("pad_before"), 0, d.integer("pad_after")});
  row_as_sequence(ctx, name, y, To, F, ctx.output_name(i));
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter conv1d({"conv1d"}, export_conv1d);

// separable_conv2d: the depthwise Conv (group = C, no bias) with the layer's window, then a 1x1 Conv
// with the pointwise kernel and the bias.
void export_separable(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig d = l.describe();
  const Value& x = ctx.input(i, 0);
  const Window2d k = window_of(d);
  const int64_t cin = x.shape[2], m = d.integer("depth_multiplier"), f = d.integer("filters");
  const ConvWeights dwk = conv_weights(ctx.param(i, "depthwise_kernel"), k.kh, k.kw, cin, m, true);
  const ConvWeights pwk = conv_weights(ctx.param(i, "pointwise_kernel"), 1, 1, cin * m, f, false);
  const Window1d wh = window_1d(x.shape[0], k.kh, k.sh, k.dh, k.pad), ww = window_1d(x.shape[1], k.kw, k.sw, k.dw, k.pad);
  const std::string mid = ctx.fresh(l.name() + "/depthwise");
  onnx::NodeProto* n = ctx.add_node(
      "Conv", {x.name, ctx.add_initializer(ctx.param_entry(i, "depthwise_kernel").name, dwk.dims, dwk.w, dwk.doc)}, {mid});
  set_window(n, k, wh, ww);
  attr_int(n, "group", cin);
  std::vector<std::string> inputs{mid, ctx.add_initializer(ctx.param_entry(i, "pointwise_kernel").name, pwk.dims, pwk.w, pwk.doc)};
  if (d.flag("use_bias")) inputs.push_back(ctx.add_initializer(ctx.param_entry(i, "bias").name, {f}, ctx.param(i, "bias")));
  attr_ints(ctx.add_node("Conv", inputs, {ctx.output_name(i)}), "kernel_shape", {1, 1});
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter separable({"separable_conv2d"}, export_separable);

// conv2d_transpose: ConvTranspose with Keras's kernel [KH, KW, F, C] as ONNX's [C, F, KH, KW], the
// pads of the convolution it transposes (from the output back to the input), and output_padding
// for the rows after the last window (Keras's output_padding, or a kernel below its stride).
void export_conv_transpose(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig d = l.describe();
  const Value& x = ctx.input(i, 0);
  const Window2d k = window_of(d);
  const int64_t C = x.shape[2], F = d.integer("filters"), OH = ctx.node(i).shape[0], OW = ctx.node(i).shape[1];
  const std::vector<float> kern = ctx.param(i, "kernel");
  std::vector<float> w(kern.size());
  for (int64_t y = 0; y < k.kh; ++y)
    for (int64_t xx = 0; xx < k.kw; ++xx)
      for (int64_t f = 0; f < F; ++f)
        for (int64_t c = 0; c < C; ++c)
          w[size_t(((c * F + f) * k.kh + y) * k.kw + xx)] = kern[size_t(((y * k.kw + xx) * F + f) * C + c)];
  std::vector<std::string> inputs{x.name, ctx.add_initializer(ctx.param_entry(i, "kernel").name, {C, F, k.kh, k.kw}, w,
                                                              "trainer [KH, KW, F, C] (Keras's Conv2DTranspose) as "
                                                              "ONNX [C, F, KH, KW]")};
  if (d.flag("use_bias")) inputs.push_back(ctx.add_initializer(ctx.param_entry(i, "bias").name, {F}, ctx.param(i, "bias")));
  const Window1d wh = window_1d(OH, k.kh, k.sh, k.dh, k.pad), ww = window_1d(OW, k.kw, k.sw, k.dw, k.pad);
  // ONNX's output: strides·(in - 1) + (k - 1)·dilation + 1 - pads + output_padding.
  auto extra = [](int64_t out, int64_t in, int kk, int s, int dil, const Window1d& win) {
    return out - (s * (in - 1) + int64_t(kk - 1) * dil + 1 - win.pad_before - win.pad_after);
  };
  onnx::NodeProto* n = ctx.add_node("ConvTranspose", inputs, {ctx.output_name(i)});
  set_window(n, k, wh, ww);
  attr_ints(n, "output_padding",
            {extra(OH, x.shape[0], k.kh, k.sh, k.dh, wh), extra(OW, x.shape[1], k.kw, k.sw, k.dw, ww)});
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter conv_transpose({"conv2d_transpose"}, export_conv_transpose);

}  // namespace
}  // namespace trainer::onnx_export
