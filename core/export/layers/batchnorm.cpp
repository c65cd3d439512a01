// ONNX export of batchnorm: nothing when folded into the layer before it (the default); else
// BatchNormalization (images [N, C, H, W] and flat [N, C]) or Mul + Add on the last axis (sequences).
#include "core/export/registry.h"

namespace trainer::onnx_export {
namespace {

void export_batchnorm(ExportContext& ctx, size_t i) {
  const Value& x = ctx.input(i, 0);
  if (ctx.is_folded(i)) {  // the producer applies it
    ctx.set_output(i, x);
    return;
  }
  const std::string out = ctx.output_name(i);
  if (x.shape.rank() != 2) {
    const int64_t c = x.shape.back();
    std::vector<std::string> in{x.name};
    for (const char* p : {"gamma", "beta", "moving_mean", "moving_variance"})
      in.push_back(ctx.add_initializer(ctx.param_entry(i, p).name, {c}, ctx.param(i, p)));
    onnx::NodeProto* n = ctx.add_node("BatchNormalization", in, {out});
    attr_float(n, "epsilon", float(ctx.node(i).layer->describe().real("epsilon")));
    ctx.set_output(i, {out, ctx.node(i).shape});
    return;
  }
  // [N, T, C]: ONNX normalises axis 1, the trainer the last: the same map as y = x * scale + shift.
  const ChannelAffine a = batchnorm_affine(ctx, i);
  const std::vector<float> scale(a.scale.begin(), a.scale.end()), shift(a.shift.begin(), a.shift.end());
  const int64_t c = int64_t(scale.size());
  const std::string name = ctx.node(i).layer->name();
  const std::string s = ctx.add_initializer(name + "/scale", {c}, scale, "gamma / sqrt(moving_variance + epsilon)");
  const std::string t = ctx.add_initializer(name + "/shift", {c}, shift, "beta - moving_mean * scale");
  const std::string mid = ctx.fresh(name + "/scaled");
  ctx.add_node("Mul", {x.name, s}, {mid});
  ctx.add_node("Add", {mid, t}, {out});
  ctx.set_output(i, {out, ctx.node(i).shape});
}

const RegisterExporter bn({"batchnorm"}, export_batchnorm);

}  // namespace
}  // namespace trainer::onnx_export
