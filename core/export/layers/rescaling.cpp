// ONNX export of rescaling: x·scale + offset per channel (channel_affine.h), one value spread over the channels.
#include "core/export/layers/channel_affine.h"

namespace trainer::onnx_export {
namespace {

void export_rescaling(ExportContext& ctx, size_t i) {
  const Value& x = ctx.input(i, 0);
  const LayerConfig c = ctx.node(i).layer->describe();
  const int64_t C = x.shape.rank() ? x.shape.back() : 1, k = c.integer("channels");
  std::vector<float> scale(static_cast<size_t>(C)), offset(static_cast<size_t>(C));
  for (int64_t j = 0; j < C; ++j) {
    scale[size_t(j)] = float(c.real("scale_" + std::to_string(k == 1 ? 0 : j)));
    offset[size_t(j)] = float(c.real("offset_" + std::to_string(k == 1 ? 0 : j)));
  }
  channel_affine(ctx, ctx.node(i).layer->name(), x.name, x.shape, scale, offset, ctx.output_name(i));
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter rescaling({"rescaling"}, export_rescaling);

}  // namespace
}  // namespace trainer::onnx_export
