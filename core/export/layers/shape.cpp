// ONNX export of the layers that move or join values: flatten (the trainer's H, W, C order kept:
// Transpose to NHWC first), dropout (left out: inference), zero_pad2d (Pad), concat (the channel
// axis), add (Add).
#include "core/export/registry.h"

namespace trainer::onnx_export {
namespace {

void export_flatten(ExportContext& ctx, size_t i) {
  const Value& x = ctx.input(i, 0);
  const std::string name = ctx.node(i).layer->name();
  if (x.shape.rank() == 1) {  // already flat
    ctx.set_output(i, x);
    return;
  }
  std::string in = x.name;
  // NCHW holds the values in C, H, W order; the trainer's flatten (and the dense kernel after it)
  // reads them in H, W, C order. The orders agree when H * W or C is 1.
  if (x.shape.rank() == 3 && x.shape[0] * x.shape[1] > 1 && x.shape[2] > 1) {
    in = ctx.fresh(name + "/nhwc");
    attr_ints(ctx.add_node("Transpose", {x.name}, {in}), "perm", {0, 2, 3, 1});
  }
  attr_int(ctx.add_node("Flatten", {in}, {ctx.output_name(i)}), "axis", 1);
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

void export_dropout(ExportContext& ctx, size_t i) { ctx.set_output(i, ctx.input(i, 0)); }

void export_zero_pad(ExportContext& ctx, size_t i) {
  const LayerConfig d = ctx.node(i).layer->describe();
  if (d.has("folded_into")) {  // its reader's Conv takes the zeros as pads (pad_fold)
    ctx.set_output(i, ctx.input(i, 0));
    return;
  }
  const std::string name = ctx.node(i).layer->name();
  // [N, C, H, W]: begins of every axis, then ends.
  const std::string pads = ctx.add_int64s(
      name + "/pads", {0, 0, d.integer("top"), d.integer("left"), 0, 0, d.integer("bottom"), d.integer("right")});
  attr_string(ctx.add_node("Pad", {ctx.input(i, 0).name, pads}, {ctx.output_name(i)}), "mode", "constant");
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

void export_concat(ExportContext& ctx, size_t i) {
  std::vector<std::string> in;
  for (size_t k = 0; k < ctx.node(i).inputs.size(); ++k) in.push_back(ctx.input(i, k).name);
  attr_int(ctx.add_node("Concat", in, {ctx.output_name(i)}), "axis", channel_axis(ctx.node(i).shape));
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

void export_add(ExportContext& ctx, size_t i) {
  const size_t k = ctx.node(i).inputs.size();
  std::string acc = ctx.input(i, 0).name;
  for (size_t j = 1; j < k; ++j) {
    const std::string out = j + 1 == k ? ctx.output_name(i) : ctx.fresh(ctx.node(i).layer->name() + "/partial");
    ctx.add_node("Add", {acc, ctx.input(i, j).name}, {out});
    acc = out;
  }
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter flatten({"flatten"}, export_flatten);
const RegisterExporter dropout({"dropout"}, export_dropout);
const RegisterExporter zero_pad({"zero_pad2d"}, export_zero_pad);
const RegisterExporter concat({"concat"}, export_concat);
const RegisterExporter add({"add"}, export_add);

}  // namespace
}  // namespace trainer::onnx_export
