// ONNX export of multi_head_attention: MatMul projections, heads split by Reshape/Transpose, scaled scores (a constant mask added when causal), Softmax, the heads joined and projected.
#include <cmath>
#include <limits>

#include "core/export/registry.h"

namespace trainer::onnx_export {
namespace {

// x [N, T, dq] (and kv [N, S, dkv]):
//   q = x·Wq/√Dk (+ bq/√Dk: the scale folded into the query, as Keras applies it; OpenCV 4.6 also
//   multiplies a 4-D tensor by a scalar wrongly) -> Reshape [N, T, H, Dk] -> Transpose [N, H, T, Dk];
//   k likewise -> [N, H, Dk, S]; v -> [N, H, S, Dv]; scores = q·k (+ mask [T, S]: 0 where visible,
//   -1e9 above the diagonal when causal); p = Softmax(axis -1); o = p·v -> Transpose [N, T, H, Dv]
//   -> Reshape [N, T, H·Dv]; y = o·Wo (+ bo). The kernels are the trainer's [in, H·D] views (Keras's
//   [in, H, D]).
void export_attention(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const LayerConfig c = l.describe();
  const std::string name = l.name();
  const Value& xq = ctx.input(i, 0);
  const Value& xkv = ctx.node(i).inputs.size() > 1 ? ctx.input(i, 1) : xq;
  const int64_t H = c.integer("num_heads"), Dk = c.integer("key_dim"), Dv = c.integer("value_dim");
  const int64_t T = xq.shape[0], S = xkv.shape[0], dq = xq.shape[1], dkv = xkv.shape[1];
  const bool bias = c.flag("use_bias"), causal = c.flag("causal");

  // A projection: MatMul by the parameter as [in, out] (+ its bias), both times `scale`, into `to`
  // (or a fresh name).
  auto project = [&](const std::string& x, const char* which, int64_t in, int64_t out, const std::string& to = "",
                     double scale = 1.0) {
    const std::string base = name + "/" + which;
    auto scaled = [&](std::vector<float> v) {
      if (scale != 1.0)
        for (float& e : v) e = float(double(e) * scale);
      return v;
    };
    const std::string doc = scale != 1.0 ? "times 1/sqrt(key_dim): the scores' scale, folded in as Keras scales the query" : "";
    const std::string w = ctx.add_initializer(ctx.param_entry(i, std::string(which) + "/kernel").name, {in, out},
                                              scaled(ctx.param(i, std::string(which) + "/kernel")), doc);
    const std::string y = !bias && !to.empty() ? to : ctx.fresh(base + "/matmul");
    ctx.add_node("MatMul", {x, w}, {y});
    if (!bias) return y;
    const std::string b = ctx.add_initializer(ctx.param_entry(i, std::string(which) + "/bias").name, {out},
                                              scaled(ctx.param(i, std::string(which) + "/bias")), doc);
    const std::string yb = to.empty() ? ctx.fresh(base + "/biased") : to;
    ctx.add_node("Add", {y, b}, {yb});
    return yb;
  };
  // [N, rows, H·D] -> [N, H, rows, D] (perm 0 2 1 3) or [N, H, D, rows] (perm 0 2 3 1).
  auto heads = [&](const std::string& x, const char* which, int64_t rows, int64_t D, std::vector<int64_t> perm) {
    const std::string r = ctx.fresh(name + "/" + which + "/heads"), t = ctx.fresh(name + "/" + which + "/by_head");
    ctx.add_node("Reshape", {x, ctx.add_int64s(name + "/" + which + "/heads_shape", {0, rows, H, D})}, {r});
    attr_ints(ctx.add_node("Transpose", {r}, {t}), "perm", perm);
    return t;
  };
  const std::string q =
      heads(project(xq.name, "query", dq, H * Dk, "", 1.0 / std::sqrt(double(Dk))), "query", T, Dk, {0, 2, 1, 3});
  const std::string k = heads(project(xkv.name, "key", dkv, H * Dk), "key", S, Dk, {0, 2, 3, 1});
  const std::string v = heads(project(xkv.name, "value", dkv, H * Dv), "value", S, Dv, {0, 2, 1, 3});
  const std::string scores = ctx.fresh(name + "/scores");
  ctx.add_node("MatMul", {q, k}, {scores});
  std::string logits = scores;
  if (causal) {
    std::vector<float> mask(size_t(T * S), 0.0f);
    for (int64_t a = 0; a < T; ++a)
      for (int64_t b = a + 1; b < S; ++b) mask[size_t(a * S + b)] = -1e9f;
    logits = ctx.fresh(name + "/masked");
    ctx.add_node("Add", {scores, ctx.add_initializer(name + "/causal_mask", {T, S}, mask,
                                                     "0 where key j <= query i, -1e9 above the diagonal")},
                 {logits});
  }
  const std::string p = ctx.fresh(name + "/probs"), o = ctx.fresh(name + "/context"),
                    ot = ctx.fresh(name + "/context_by_time"), joined = ctx.fresh(name + "/joined");
  attr_int(ctx.add_node("Softmax", {logits}, {p}), "axis", -1);
  ctx.add_node("MatMul", {p, v}, {o});
  attr_ints(ctx.add_node("Transpose", {o}, {ot}), "perm", {0, 2, 1, 3});
  ctx.add_node("Reshape", {ot, ctx.add_int64s(name + "/joined_shape", {0, T, H * Dv})}, {joined});
  project(joined, "attention_output", H * Dv, dq, ctx.output_name(i));
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter attn({"multi_head_attention"}, export_attention);

}  // namespace
}  // namespace trainer::onnx_export
