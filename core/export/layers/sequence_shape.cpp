// ONNX export of zero_pad1d, cropping1d, up_sampling1d and repeat_vector: Pad, Slice and Resize (nearest) on the sequence as the one-row image [N, C, 1, T] (a vector: one step; one_row.h: OpenCV 4.6 takes these nodes on 4-D tensors).
#include "core/export/layers/one_row.h"
#include "core/export/registry.h"

namespace trainer::onnx_export {
namespace {

// The node `op` on layer i's input as [N, C, 1, T], with the inputs `more` after it, turned back
// into the sequence; returns the node for its attributes.
onnx::NodeProto* one_row(ExportContext& ctx, size_t i, const char* op, const std::vector<std::string>& more) {
  const std::string name = ctx.node(i).layer->name();
  const Shape& x = ctx.input(i, 0).shape;  // [T, C], or [C]: one step
  const Shape& out = ctx.node(i).shape;    // [T', C]
  const bool vector = x.rank() == 1;
  std::vector<std::string> inputs{sequence_as_row(ctx, name, ctx.input(i, 0).name, vector ? 1 : x[0], x[x.rank() - 1])};
  inputs.insert(inputs.end(), more.begin(), more.end());
  const std::string y = ctx.fresh(name + "/row");
  onnx::NodeProto* n = ctx.add_node(op, inputs, {y});
  row_as_sequence(ctx, name, y, out[0], out[1], ctx.output_name(i));
  ctx.set_output(i, {ctx.output_name(i), out});
  return n;
}

void export_zero_pad1d(ExportContext& ctx, size_t i) {
  const std::string name = ctx.node(i).layer->name();
  const LayerConfig d = ctx.node(i).layer->describe();
  const std::string pads = ctx.add_int64s(name + "/pads", {0, 0, 0, d.integer("before"), 0, 0, 0, d.integer("after")});
  attr_string(one_row(ctx, i, "Pad", {pads}), "mode", "constant");
}

void export_cropping1d(ExportContext& ctx, size_t i) {
  const std::string name = ctx.node(i).layer->name();
  const LayerConfig d = ctx.node(i).layer->describe();
  const int64_t T = ctx.input(i, 0).shape[0];
  one_row(ctx, i, "Slice",
          {ctx.add_int64s(name + "/starts", {d.integer("before")}),
           ctx.add_int64s(name + "/ends", {T - d.integer("after")}), ctx.add_int64s(name + "/axes", {3})});
}

// up_sampling1d, and repeat_vector (its vector as one step): Resize, nearest.
void export_up_sampling1d(ExportContext& ctx, size_t i) {
  const std::string name = ctx.node(i).layer->name();
  const LayerConfig d = ctx.node(i).layer->describe();
  const int64_t size = d.has("n") ? d.integer("n") : d.integer("size");
  onnx::NodeProto* n = one_row(ctx, i, "Resize",
                               {ctx.add_initializer(name + "/roi", {0}, {}),
                                ctx.add_initializer(name + "/scales", {4}, {1.0f, 1.0f, 1.0f, float(size)})});
  attr_string(n, "mode", "nearest");
  attr_string(n, "coordinate_transformation_mode", "asymmetric");
  attr_string(n, "nearest_mode", "floor");
}

const RegisterExporter zero_pad1d({"zero_pad1d"}, export_zero_pad1d);
const RegisterExporter cropping1d({"cropping1d"}, export_cropping1d);
const RegisterExporter up_sampling1d({"up_sampling1d", "repeat_vector"}, export_up_sampling1d);

}  // namespace
}  // namespace trainer::onnx_export
