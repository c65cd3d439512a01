// ONNX export of the element-wise merges (subtract as Sub, average as Sum then Div, maximum as Max, minimum as Min) and of prelu (PRelu, or Relu, Neg, Mul and Sub where alpha varies over more than the channels).
#include <fmt/format.h>

#include "core/export/registry.h"

namespace trainer::onnx_export {
namespace {

std::vector<std::string> input_names(ExportContext& ctx, size_t i) {
  std::vector<std::string> in;
  for (size_t k = 0; k < ctx.node(i).inputs.size(); ++k) in.push_back(ctx.input(i, k).name);
  return in;
}

// One variadic node over every input (Sub over the two); average's sum divided by the count, as the
// layer computes it.
void export_merge(ExportContext& ctx, size_t i) {
  const std::string& type = ctx.node(i).layer->type();
  const std::vector<std::string> in = input_names(ctx, i);
  const std::string out = ctx.output_name(i);
  if (type == "average") {
    const std::string sum = ctx.fresh(ctx.node(i).layer->name() + "/sum");
    ctx.add_node("Sum", in, {sum});
    ctx.add_node("Div", {sum, ctx.add_scalar(ctx.node(i).layer->name() + "/count", float(in.size()))}, {out});
  } else {
    ctx.add_node(type == "subtract" ? "Sub" : type == "maximum" ? "Max" : "Min", in, {out});
  }
  ctx.set_output(i, {out, ctx.node(i).shape});
}

// prelu: ONNX holds an image as NCHW, so alpha [H', W', C'] (1 on its shared axes) is read as
// [C', H', W']. One slope per channel (or one slope) is a PRelu node; OpenCV 4.6 applies PRelu's
// slope along axis 1 only, so any other alpha is written as Relu(x) − Relu(−x)·alpha, alpha expanded
// to the whole sample (the one Mul by a constant OpenCV runs). Over a sequence [T, F] OpenCV runs
// neither form: refused, saying so.
void export_prelu(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const Value& x = ctx.input(i, 0);
  const Shape& s = x.shape;
  const Shape& a = ctx.param_entry(i, "alpha").spec.shape;
  const std::vector<float> alpha = ctx.param(i, "alpha");
  const std::string out = ctx.output_name(i), name = l.name();
  const bool image = s.rank() == 3, one = a.numel() == 1;
  if (s.rank() == 2 && !one)
    l.spec().fail(fmt::format("prelu '{}': a slope per step or feature of a sequence {} has no ONNX form OpenCV runs here "
                              "(one slope: shared_axes [1, 2] does)",
                              name, s.str()));
  const bool per_channel = one || s.rank() == 1 || (image && a[0] == 1 && a[1] == 1);
  if (per_channel) {
    const std::vector<int64_t> dims = one ? std::vector<int64_t>{1}
                                          : image ? std::vector<int64_t>{a[2], 1, 1}
                                                  : std::vector<int64_t>{a[0]};
    ctx.add_node("PRelu", {x.name, ctx.add_initializer(ctx.param_entry(i, "alpha").name, dims, alpha)}, {out});
    ctx.set_output(i, {out, ctx.node(i).shape});
    return;
  }
  // The whole sample's slopes, in ONNX's order (C, H, W for an image).
  const int64_t H = s[0], W = s[1], C = s[2];
  std::vector<float> full(size_t(s.numel()));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        full[size_t((c * H + h) * W + w)] =
            alpha[size_t(((a[0] == 1 ? 0 : h) * a[1] + (a[1] == 1 ? 0 : w)) * a[2] + (a[2] == 1 ? 0 : c))];
  const std::string neg = ctx.fresh(name + "/neg"), rneg = ctx.fresh(name + "/relu_neg"),
                    scaled = ctx.fresh(name + "/negative_part"), pos = ctx.fresh(name + "/relu");
  ctx.add_node("Neg", {x.name}, {neg});
  ctx.add_node("Relu", {neg}, {rneg});
  ctx.add_node("Mul", {rneg, ctx.add_initializer(ctx.param_entry(i, "alpha").name, {C, H, W}, full, "alpha, every pixel")},
               {scaled});
  ctx.add_node("Relu", {x.name}, {pos});
  ctx.add_node("Sub", {pos, scaled}, {out});
  ctx.set_output(i, {out, ctx.node(i).shape});
}

const RegisterExporter merges({"subtract", "average", "maximum", "minimum"}, export_merge);
const RegisterExporter prelu({"prelu"}, export_prelu);

}  // namespace
}  // namespace trainer::onnx_export
