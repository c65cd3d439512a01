// ONNX export of max_pool2d, avg_pool2d, max_pool1d, avg_pool1d (MaxPool / AveragePool with Keras
// padding as explicit pads, the 1D ones over one row; the average excludes the padding,
// count_include_pad = 0, as Keras), global_avg_pool2d and
// global_max_pool2d (GlobalAveragePool / GlobalMaxPool, then Flatten to [N, C]), global_avg_pool1d
// and global_max_pool1d (ReduceMean / ReduceMax over a sequence's time axis, axes an attribute up to
// opset 17).
#include "core/export/layers/one_row.h"
#include "core/export/registry.h"
#include "core/ops/window.h"

namespace trainer::onnx_export {
namespace {

// An image [N, C, H, W]; a sequence [N, T, C] (max_pool1d, avg_pool1d) as the one-row image
// [N, C, 1, T] (one_row.h).
void export_pool(ExportContext& ctx, size_t i, const char* op) {
  const std::string layer = ctx.node(i).layer->name();
  const LayerConfig d = ctx.node(i).layer->describe();
  const Value& x = ctx.input(i, 0);
  const bool sequence = x.shape.rank() == 2;
  const int64_t h = sequence ? 1 : x.shape[0], w = sequence ? x.shape[0] : x.shape[1];
  const int kh = int(d.integer("pool_h")), kw = int(d.integer("pool_w"));
  const int sh = int(d.integer("strides_h")), sw = int(d.integer("strides_w"));
  const Padding pad = d.text("padding") == "same" ? Padding::Same : Padding::Valid;
  const Window1d wh = window_1d(h, kh, sh, 1, pad), ww = window_1d(w, kw, sw, 1, pad);
  const std::string in = sequence ? sequence_as_row(ctx, layer, x.name, x.shape[0], x.shape[1]) : x.name;
  const std::string out = sequence ? ctx.fresh(layer + "/pooled") : ctx.output_name(i);
  onnx::NodeProto* n = ctx.add_node(op, {in}, {out});
  attr_ints(n, "kernel_shape", {kh, kw});
  attr_ints(n, "strides", {sh, sw});
  attr_ints(n, "pads", {wh.pad_before, ww.pad_before, wh.pad_after, ww.pad_after});
  if (sequence) row_as_sequence(ctx, layer, out, ctx.node(i).shape[0], ctx.node(i).shape[1], ctx.output_name(i));
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

void export_global(ExportContext& ctx, size_t i, const char* op) {
  const std::string pooled = ctx.fresh(ctx.node(i).layer->name() + "/nc11");
  ctx.add_node(op, {ctx.input(i, 0).name}, {pooled});
  attr_int(ctx.add_node("Flatten", {pooled}, {ctx.output_name(i)}), "axis", 1);
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

// [N, T, F] -> [N, F].
void export_global_1d(ExportContext& ctx, size_t i, const char* op) {
  onnx::NodeProto* n = ctx.add_node(op, {ctx.input(i, 0).name}, {ctx.output_name(i)});
  attr_ints(n, "axes", {1});
  attr_int(n, "keepdims", 0);
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter max_pool({"max_pool2d", "max_pool1d"}, [](ExportContext& ctx, size_t i) { export_pool(ctx, i, "MaxPool"); });
const RegisterExporter avg_pool({"avg_pool2d", "avg_pool1d"},
                                [](ExportContext& ctx, size_t i) { export_pool(ctx, i, "AveragePool"); });
const RegisterExporter global_avg({"global_avg_pool2d"},
                                  [](ExportContext& c, size_t i) { export_global(c, i, "GlobalAveragePool"); });
const RegisterExporter global_max({"global_max_pool2d"},
                                  [](ExportContext& c, size_t i) { export_global(c, i, "GlobalMaxPool"); });
const RegisterExporter global_avg_1d({"global_avg_pool1d"},
                                     [](ExportContext& c, size_t i) { export_global_1d(c, i, "ReduceMean"); });
const RegisterExporter global_max_1d({"global_max_pool1d"},
                                     [](ExportContext& c, size_t i) { export_global_1d(c, i, "ReduceMax"); });

}  // namespace
}  // namespace trainer::onnx_export
