// ONNX export of group_norm: each group's values reshaped into one row of [N, G, M], InstanceNormalization over it, reshaped back, then gamma and beta per channel (GroupNormalization is opset 18 only; OpenCV 4.6 reads InstanceNormalization).
#include "core/export/layers/channel_affine.h"

namespace trainer::onnx_export {
namespace {

// An image [N, C, H, W] (ONNX's layout) groups consecutive channels, so [N, G, Cg·H·W] holds one
// group per row; a sequence [N, T, C] is transposed to [N, G, T, Cg] first; a vector [N, C] is
// [N, G, Cg]. InstanceNormalization (scale 1, bias 0, the layer's epsilon) normalises each row with
// its biased variance, as the layer does. Then gamma and beta (channel_affine.h).
void export_group_norm(ExportContext& ctx, size_t i) {
  const Value& x = ctx.input(i, 0);
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig c = l.describe();
  const std::string name = l.name(), out = ctx.output_name(i);
  const Shape& s = x.shape;
  const int64_t C = s.back(), G = c.integer("groups"), cg = C / G;
  const bool image = s.rank() == 3, sequence = s.rank() == 2;
  const bool scale = c.flag("scale"), center = c.flag("center");
  std::string v = x.name;
  onnx::NodeProto* last = nullptr;  // the node `node` added last
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& what) {
    const std::string o = ctx.fresh(name + "/" + what);
    last = ctx.add_node(op, std::move(in), {o});
    return o;
  };
  if (sequence) {  // [N, T, C] -> [N, T, G, Cg] -> [N, G, T, Cg]
    v = node("Reshape", {v, ctx.add_int64s(name + "/split_shape", {-1, s[0], G, cg})}, "split");
    v = node("Transpose", {v}, "grouped");
    attr_ints(last, "perm", {0, 2, 1, 3});
  }
  v = node("Reshape", {v, ctx.add_int64s(name + "/rows_shape", {-1, G, s.numel() / G})}, "rows");
  const std::string n = node("InstanceNormalization",
                             {v, ctx.add_initializer(name + "/ones", {G}, std::vector<float>(size_t(G), 1.0f), "ones"),
                              ctx.add_initializer(name + "/zeros", {G}, std::vector<float>(size_t(G), 0.0f), "zeros")},
                             "normalised");
  attr_float(last, "epsilon", float(c.real("epsilon")));
  v = n;
  if (sequence) {  // back to [N, G, T, Cg] -> [N, T, G, Cg] -> [N, T, C]
    v = node("Reshape", {v, ctx.add_int64s(name + "/grouped_shape", {-1, G, s[0], cg})}, "ungrouped");
    v = node("Transpose", {v}, "steps");
    attr_ints(last, "perm", {0, 2, 1, 3});
  }
  std::vector<int64_t> back{-1};
  if (image) back.insert(back.end(), {C, s[0], s[1]});
  else for (size_t k = 0; k < s.rank(); ++k) back.push_back(s[k]);
  const bool affine = scale || center;
  v = node("Reshape", {v, ctx.add_int64s(name + "/out_shape", back)}, affine ? "shaped" : "out");
  const std::vector<float> gamma = scale ? ctx.param(i, "gamma") : std::vector<float>(size_t(C), 1.0f);
  const std::vector<float> beta = center ? ctx.param(i, "beta") : std::vector<float>(size_t(C), 0.0f);
  if (!affine) ctx.add_node("Identity", {v}, {out});
  else channel_affine(ctx, name, v, s, gamma, beta, out);
  ctx.set_output(i, {out, ctx.node(i).shape});
}

const RegisterExporter gn({"group_norm"}, export_group_norm);

}  // namespace
}  // namespace trainer::onnx_export
