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

static std::string bytes_str(double b) {
  if (b >= 1 << 30) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (b >= 1 << 20) return fmt::format("{:.1f} MiB", b / (1 << 20));
  return fmt::format("{:.1f} KiB", b / (1 << 10));
}

std::vector<DeviceMemory> memory_per_device(const Graph& g, const Placement& placement) {
  const ParamLayout& ps = g.params();
  std::vector<DeviceMemory> out(placement.devices.size());
  for (size_t d = 0; d < out.size(); ++d) out[d].device = placement.devices[d];
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const GraphNode& n = g.nodes()[i];
    const size_t d = size_t(placement.layer_device[i]);
    // A shared layer's parameters are held by every device that runs one of its uses, once each.
    bool first_here = true;
    if (n.shares >= 0)
      for (size_t o = 0; o < i; ++o)
        first_here &= !(size_t(placement.layer_device[o]) == d && (int(o) == n.shares || g.nodes()[o].shares == n.shares));
    if (first_here)  // (a tied parameter is its owner's: counted there, on the same device)
      for (size_t k = 0; k < n.params.size(); ++k)
        if (!n.tied[k]) out[d].params += ps.entries()[n.params[k]].spec.shape.numel();
    out[d].activations_per_sample += 2 * n.shape.numel();  // the output and its gradient
    // Inputs this device receives: a copy of each model input it reads; a copy of another
    // device's activation and of its gradient.
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int j = n.inputs[k];
      bool seen = false;
      for (size_t o = 0; o < i && !seen; ++o)
        if (size_t(placement.layer_device[o]) == d)
          for (int q : g.nodes()[o].inputs) seen |= q == j;
      for (size_t q = 0; q < k; ++q) seen |= n.inputs[q] == j;
      if (seen) continue;
      if (is_model_input(j))
        out[d].activations_per_sample += g.input_shapes()[size_t(model_input_index(j))].numel();
      else if (size_t(placement.layer_device[size_t(j)]) != d)
        out[d].activations_per_sample += 2 * g.nodes()[size_t(j)].shape.numel();
    }
  }
  return out;
}

std::string model_summary(const Graph& g, const std::string& name, const Placement* placement, int64_t batch) {
  size_t w_layer = 28, w_shape = 22;
  for (const GraphNode& n : g.nodes()) {
    const LayerInfo* info = find_layer(n.layer->type());
    w_layer = std::max(w_layer, n.layer->name().size() + (info ? info->keras_name.size() : 0) + 4);
  }
  const size_t w_dev = placement ? 9 : 0;
  std::string rule_eq(w_layer + w_shape + 12 + 30 + w_dev, '='), rule(rule_eq.size(), '_');
  std::string s = fmt::format("Model: \"{}\"\n{}\n", name, rule);
  auto row = [&](const std::string& a, const std::string& b, const std::string& c, const std::string& dev, const std::string& d) {
    s += fmt::format(" {:<{}}{:<{}}{:>10}  {:<{}}{}\n", a, w_layer, b, w_shape, c, dev, w_dev, d);
  };
  row("Layer (type)", "Output Shape", "Param #", placement ? "Device" : "", "Connected to");
  s += rule_eq + "\n";
  for (size_t k = 0; k < g.input_shapes().size(); ++k)
    row(fmt::format("{} (InputLayer)", g.input_names()[k]), g.input_shapes()[k].keras_str(), "0", "", "");
  const ParamLayout& ps = g.params();
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const GraphNode& n = g.nodes()[i];
    int64_t params = 0;
    std::string inputs;
    for (int j : n.inputs)
      inputs += (inputs.empty() ? "" : ", ") + (is_model_input(j) ? g.input_names()[size_t(model_input_index(j))] : g.nodes()[size_t(j)].layer->name());
    if (n.shares >= 0) inputs += fmt::format(" (shares {})", g.nodes()[size_t(n.shares)].layer->name());
    for (size_t k = 0; k < n.params.size(); ++k) {  // a tied parameter counts at its owner (as Keras counts a shared one)
      const ParamEntry& e = ps.entries()[n.params[k]];
      if (n.tied[k]) inputs += fmt::format(" (tied to {})", e.name);
      else params += e.spec.shape.numel();
    }
    const LayerInfo* info = find_layer(n.layer->type());
    const std::string dev = placement ? placement->devices[size_t(placement->layer_device[i])] : "";
    row(fmt::format("{} ({})", n.layer->name(), info ? info->keras_name : n.layer->type()), n.shape.keras_str(),
        n.shares >= 0 ? std::string("(shared)") : with_thousands(params), dev, inputs);
  }
  int64_t trainable = ps.count(true), frozen = ps.count(false);
  s += rule_eq + "\n";
  s += fmt::format("Total params: {}\nTrainable params: {}\nNon-trainable params: {}\n", with_thousands(trainable + frozen),
                   with_thousands(trainable), with_thousands(frozen));
  double f = double(g.flops_per_sample());
  s += fmt::format("FLOPs per sample: {} forward, ~{} training (forward + backward)\n", flops_str(f), flops_str(3 * f));
  if (placement) {
    s += fmt::format("Memory per device (fp32; activations: inputs, outputs and their gradients, without layer workspaces; "
                     "batch {}):\n", batch);
    for (const DeviceMemory& m : memory_per_device(g, *placement))
      s += fmt::format("  {:<8} params {:>12} ({}), activations {} per sample, {} per batch\n", m.device,
                       with_thousands(m.params), bytes_str(4.0 * double(m.params)),
                       bytes_str(4.0 * double(m.activations_per_sample)),
                       bytes_str(4.0 * double(m.activations_per_sample) * double(batch)));
  }
  s += rule + "\n";
  return s;
}

}  // namespace trainer
