// The summary table.
#include "core/graph/summary.h"

#include <fmt/format.h>

namespace trainer {

std::string with_thousands(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}

static std::string flops_str(double f) {
  if (f >= 1e9) return fmt::format("{:.3f} GFLOPs", f / 1e9);
  if (f >= 1e6) return fmt::format("{:.2f} MFLOPs", f / 1e6);
  return fmt::format("{:.0f} FLOPs", f);
}

std::string model_summary(const Graph& g, const std::string& name) {
  size_t w_layer = 28, w_shape = 22;
  for (const GraphNode& n : g.nodes()) {
    const LayerInfo* info = find_layer(n.layer->type());
    w_layer = std::max(w_layer, n.layer->name().size() + (info ? info->keras_name.size() : 0) + 4);
  }
  std::string rule_eq(w_layer + w_shape + 12 + 30, '='), rule(rule_eq.size(), '_');
  std::string s = fmt::format("Model: \"{}\"\n{}\n", name, rule);
  auto row = [&](const std::string& a, const std::string& b, const std::string& c, const std::string& d) {
    s += fmt::format(" {:<{}}{:<{}}{:>10}  {}\n", a, w_layer, b, w_shape, c, d);
  };
  row("Layer (type)", "Output Shape", "Param #", "Connected to");
  s += rule_eq + "\n";
  row(fmt::format("{} (InputLayer)", "input"), g.input_shapes()[0].keras_str(), "0", "");
  const ParamStore& ps = g.params();
  for (const GraphNode& n : g.nodes()) {
    int64_t params = 0;
    for (size_t p : n.params) params += ps.entries()[p].spec.shape.numel();
    std::string inputs;
    for (int j : n.inputs) inputs += (inputs.empty() ? "" : ", ") + (j < 0 ? std::string("input") : g.nodes()[size_t(j)].layer->name());
    const LayerInfo* info = find_layer(n.layer->type());
    row(fmt::format("{} ({})", n.layer->name(), info ? info->keras_name : n.layer->type()), n.shape.keras_str(),
        with_thousands(params), inputs);
  }
  int64_t trainable = ps.count(true), frozen = ps.count(false);
  s += rule_eq + "\n";
  s += fmt::format("Total params: {}\nTrainable params: {}\nNon-trainable params: {}\n", with_thousands(trainable + frozen),
                   with_thousands(trainable), with_thousands(frozen));
  double f = double(g.flops_per_sample());
  s += fmt::format("FLOPs per sample: {} forward, ~{} training (forward + backward)\n", flops_str(f), flops_str(3 * f));
  s += rule + "\n";
  return s;
}

}  // namespace trainer
