// ONNX export of layer_norm from MatMul (or 1x1 Conv), Mul, Add, Sqrt and Div nodes without broadcasting (LayerNormalization is opset 17 only; OpenCV 4.6 reads neither it nor broadcasts).
#include "core/export/registry.h"

namespace trainer::onnx_export {
namespace {

// y = (x - mean)/sqrt(mean((x - mean)²) + epsilon)·gamma + beta over the features. The centring, the
// variance and gamma are linear maps over the features, written as one node each: x·(I - J/C),
// (x - mean)²·(J/C) (the variance repeated in every feature, so that nothing broadcasts) and
// x·(I - J/C)·diag(gamma), with MatMul on the last axis (flat inputs, sequences) or a 1x1 Conv on an
// image, which ONNX holds as NCHW (features on axis 1); then Div and an Add of beta. ReduceMean and
// broadcast nodes would say the same with fewer operations, but OpenCV 4.6 refuses element-wise
// nodes between [N, C, H, W] and [N, 1, H, W], and a Mul of a sequence [N, T, C] by a constant [C].
void export_layer_norm(ExportContext& ctx, size_t i) {
  const Value& x = ctx.input(i, 0);
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig c = l.describe();
  const std::string name = l.name(), out = ctx.output_name(i);
  const int64_t C = x.shape.back();
  const bool image = x.shape.rank() == 3;
  const bool scale = c.flag("scale"), center = c.flag("center");
  const std::vector<float> gamma = scale ? ctx.param(i, "gamma") : std::vector<float>(size_t(C), 1.0f);
  // The map m(in, out) applied to the features of `in`: MatMul's B is [in, out], Conv's weight
  // [out, in, 1, 1].
  auto features_map = [&](const std::string& in, const std::string& what, auto m, const std::string& doc) {
    std::vector<float> w(size_t(C * C));
    for (int64_t a = 0; a < C; ++a)
      for (int64_t b = 0; b < C; ++b) w[size_t(image ? b * C + a : a * C + b)] = m(a, b);
    const std::string y = ctx.fresh(name + "/" + what);
    const std::string wname = ctx.add_initializer(name + "/" + what + "_map", image ? std::vector<int64_t>{C, C, 1, 1}
                                                                                      : std::vector<int64_t>{C, C},
                                                  w, doc);
    if (image) attr_ints(ctx.add_node("Conv", {in, wname}, {y}), "kernel_shape", {1, 1});
    else ctx.add_node("MatMul", {in, wname}, {y});
    return y;
  };
  const float inv_c = 1.0f / float(C);
  auto centring = [&](int64_t a, int64_t b) { return (a == b ? 1.0f : 0.0f) - inv_c; };
  const std::string centred = features_map(x.name, "centred", centring, "x - mean: I - J/C");
  const std::string sq = ctx.fresh(name + "/squared"), var_eps = ctx.fresh(name + "/var_eps"),
                    sd = ctx.fresh(name + "/std"), scaled = ctx.fresh(name + "/normalised");
  ctx.add_node("Mul", {centred, centred}, {sq});
  const std::string var = features_map(sq, "variance", [&](int64_t, int64_t) { return inv_c; }, "the mean: J/C");
  ctx.add_node("Add", {var, ctx.add_scalar(name + "/epsilon", float(c.real("epsilon")))}, {var_eps});
  ctx.add_node("Sqrt", {var_eps}, {sd});
  const std::string numerator =
      scale ? features_map(x.name, "centred_scaled",
                           [&](int64_t a, int64_t b) { return centring(a, b) * gamma[size_t(b)]; },
                           "(x - mean)·gamma: (I - J/C)·diag(gamma)")
            : centred;
  ctx.add_node("Div", {numerator, sd}, {center ? scaled : out});
  if (center) {
    const std::vector<int64_t> dims = image ? std::vector<int64_t>{C, 1, 1} : std::vector<int64_t>{C};
    ctx.add_node("Add", {scaled, ctx.add_initializer(ctx.param_entry(i, "beta").name, dims, ctx.param(i, "beta"))}, {out});
  }
  ctx.set_output(i, {out, ctx.node(i).shape});
}

const RegisterExporter ln({"layer_norm"}, export_layer_norm);

}  // namespace
}  // namespace trainer::onnx_export
