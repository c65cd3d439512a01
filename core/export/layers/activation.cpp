// ONNX export of the activation layers (activation, relu, relu6, sigmoid, tanh, gelu, silu, leaky_relu, elu) and softmax:
// Relu, Clip(0, 6) or Relu(x) - Relu(x - 6) (ExportContext::relu6_clip), Sigmoid, Tanh, Identity
// (linear), GELU from Erf or Tanh (opset 20's Gelu is past the opsets written), SiLU as x·Sigmoid(x),
// LeakyRelu, Elu, Selu, Softplus, HardSigmoid, HardSwish (x·HardSigmoid(x) before opset 14), mish as
// x·Tanh(Softplus(x)); Softmax over the last axis.
#include <fmt/format.h>

#include <map>

#include "core/export/registry.h"
#include "core/ops/activation.h"

namespace trainer::onnx_export {
namespace {

// One ONNX node for each function an activation layer applies, by its config name.
using ActivationWriter = std::function<void(ExportContext&, size_t, const std::string& x, const std::string& y)>;

const std::map<std::string, ActivationWriter>& activation_writers() {
  auto unary = [](const char* op) {
    return [op](ExportContext& ctx, size_t, const std::string& x, const std::string& y) { ctx.add_node(op, {x}, {y}); };
  };
  // y = x * 0.5 * (1 + f(x)): f = Erf(x / sqrt(2)) (gelu), Tanh(sqrt(2/pi) (x + 0.044715 x^3)) (gelu_tanh).
  auto gelu = [](bool tanh_form) {
    return [tanh_form](ExportContext& ctx, size_t i, const std::string& x, const std::string& y) {
      const std::string name = ctx.node(i).layer->name();
      const std::string f = ctx.fresh(name + "/f"), one_plus = ctx.fresh(name + "/one_plus"), xh = ctx.fresh(name + "/x_half");
      if (!tanh_form) {
        const std::string s = ctx.fresh(name + "/scaled");
        ctx.add_node("Mul", {x, ctx.add_scalar(name + "/inv_sqrt2", 0.70710678118654752f)}, {s});
        ctx.add_node("Erf", {s}, {f});
      } else {
        const std::string x2 = ctx.fresh(name + "/x2"), x3 = ctx.fresh(name + "/x3"), c = ctx.fresh(name + "/cubic"),
                          inner = ctx.fresh(name + "/inner"), u = ctx.fresh(name + "/u");
        ctx.add_node("Mul", {x, x}, {x2});
        ctx.add_node("Mul", {x2, x}, {x3});
        ctx.add_node("Mul", {x3, ctx.add_scalar(name + "/c", 0.044715f)}, {c});
        ctx.add_node("Add", {x, c}, {inner});
        ctx.add_node("Mul", {inner, ctx.add_scalar(name + "/sqrt_2_over_pi", 0.79788456080286536f)}, {u});
        ctx.add_node("Tanh", {u}, {f});
      }
      ctx.add_node("Add", {f, ctx.add_scalar(name + "/one", 1.0f)}, {one_plus});
      ctx.add_node("Mul", {x, ctx.add_scalar(name + "/half", 0.5f)}, {xh});
      ctx.add_node("Mul", {xh, one_plus}, {y});
    };
  };
  // relu6(x + 3) / 6 as ONNX's HardSigmoid: max(0, min(1, x/6 + 1/2)).
  const ActivationWriter hard_sigmoid = [](ExportContext& ctx, size_t, const std::string& x, const std::string& y) {
    onnx::NodeProto* n = ctx.add_node("HardSigmoid", {x}, {y});
    attr_float(n, "alpha", 1.0f / 6.0f);
    attr_float(n, "beta", 0.5f);
  };
  static const std::map<std::string, ActivationWriter> m = {
      {"gelu", gelu(false)},
      {"gelu_tanh", gelu(true)},
      {"linear", unary("Identity")},
      {"silu",
       [](ExportContext& ctx, size_t i, const std::string& x, const std::string& y) {
         const std::string s = ctx.fresh(ctx.node(i).layer->name() + "/sigmoid");
         ctx.add_node("Sigmoid", {x}, {s});
         ctx.add_node("Mul", {x, s}, {y});
       }},
      {"relu", unary("Relu")},
      {"leaky_relu",
       [](ExportContext& ctx, size_t i, const std::string& x, const std::string& y) {
         attr_float(ctx.add_node("LeakyRelu", {x}, {y}), "alpha", float(ctx.node(i).layer->describe().real("negative_slope")));
       }},
      {"elu",
       [](ExportContext& ctx, size_t i, const std::string& x, const std::string& y) {
         attr_float(ctx.add_node("Elu", {x}, {y}), "alpha", float(ctx.node(i).layer->describe().real("alpha")));
       }},
      {"selu",
       [](ExportContext& ctx, size_t, const std::string& x, const std::string& y) {
         onnx::NodeProto* n = ctx.add_node("Selu", {x}, {y});
         attr_float(n, "alpha", kSeluAlpha);
         attr_float(n, "gamma", kSeluScale);
       }},
      {"softplus", unary("Softplus")},
      {"hard_sigmoid", hard_sigmoid},
      {"hard_silu",  // HardSwish from opset 14; before it, x·HardSigmoid(x)
       [hard_sigmoid](ExportContext& ctx, size_t i, const std::string& x, const std::string& y) {
         if (ctx.opset() >= 14) return void(ctx.add_node("HardSwish", {x}, {y}));
         const std::string h = ctx.fresh(ctx.node(i).layer->name() + "/hard_sigmoid");
         hard_sigmoid(ctx, i, x, h);
         ctx.add_node("Mul", {x, h}, {y});
       }},
      {"mish",  // x·Tanh(Softplus(x)) (Mish is opset 18, past the opsets written)
       [](ExportContext& ctx, size_t i, const std::string& x, const std::string& y) {
         const std::string name = ctx.node(i).layer->name();
         const std::string sp = ctx.fresh(name + "/softplus"), t = ctx.fresh(name + "/tanh");
         ctx.add_node("Softplus", {x}, {sp});
         ctx.add_node("Tanh", {sp}, {t});
         ctx.add_node("Mul", {x, t}, {y});
       }},
      {"sigmoid", unary("Sigmoid")},
      {"tanh", unary("Tanh")},
      {"relu6",
       [](ExportContext& ctx, size_t i, const std::string& x, const std::string& y) {
         const std::string name = ctx.node(i).layer->name();
         if (ctx.relu6_clip()) {
           ctx.add_node("Clip", {x, ctx.add_scalar(name + "/min", 0.0f), ctx.add_scalar(name + "/max", 6.0f)}, {y});
           return;
         }
         // min(max(x, 0), 6) = max(x, 0) - max(x - 6, 0): 0 below 0, x up to 6, then x - (x - 6).
         const std::string relu = ctx.fresh(name + "/relu"), shifted = ctx.fresh(name + "/minus6"),
                           over = ctx.fresh(name + "/over6");
         ctx.add_node("Relu", {x}, {relu});
         ctx.add_node("Sub", {x, ctx.add_scalar(name + "/six", 6.0f)}, {shifted});
         ctx.add_node("Relu", {shifted}, {over});
         ctx.add_node("Sub", {relu, over}, {y});
       }},
  };
  return m;
}

void export_activation(ExportContext& ctx, size_t i) {
  const Layer& l = *ctx.node(i).layer;
  const std::string f = l.describe().text("function");
  auto it = activation_writers().find(f);
  if (it == activation_writers().end())
    l.spec().fail(fmt::format("{} layer '{}': activation '{}' has no ONNX export", l.type(), l.name(), f));
  it->second(ctx, i, ctx.input(i, 0).name, ctx.output_name(i));
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

void export_softmax(ExportContext& ctx, size_t i) {
  onnx::NodeProto* n = ctx.add_node("Softmax", {ctx.input(i, 0).name}, {ctx.output_name(i)});
  attr_int(n, "axis", -1);  // the trainer's softmax takes a flat input: [N, K]
  ctx.set_output(i, {ctx.output_name(i), ctx.node(i).shape});
}

const RegisterExporter act({"activation", "relu", "relu6", "sigmoid", "tanh", "gelu", "silu", "leaky_relu", "elu"},
                           export_activation);
const RegisterExporter softmax({"softmax"}, export_softmax);

}  // namespace
}  // namespace trainer::onnx_export
