// Reading `placement:` and cutting the model into per-device stages.
#include "core/graph/placement.h"

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <set>

namespace trainer {
namespace {

bool valid_label(const std::string& d) {
  if (d == "cpu") return true;
  for (const char* kind : {"cpu:", "gpu:"}) {
    std::string k = kind;
    if (d.rfind(k, 0) != 0 || d.size() == k.size() || d.size() > k.size() + 2) continue;
    bool digits = true;
    for (size_t i = k.size(); i < d.size(); ++i) digits &= std::isdigit(static_cast<unsigned char>(d[i])) != 0;
    if (digits) return true;
  }
  return false;
}

}  // namespace

Placement read_placement(const ModelSpec& spec, const cfg::Node& node) {
  if (!node.is_map() || node.size() == 0) node.fail("'placement' must map layer (or block) names to devices: {conv1: cpu:0, head: cpu:1}");
  std::vector<std::string> names;
  for (const LayerDef& d : spec.layers) names.push_back(d.name);
  // name -> label, checked: every key names a layer or a block instance.
  std::map<std::string, std::string> wanted;
  for (const std::string& key : node.keys()) {
    std::string label = node.child(key).as<std::string>();
    if (!valid_label(label))
      node.child(key).fail(fmt::format("'{}' is not a device: use cpu, cpu:N (a virtual CPU device) or gpu:N", label));
    bool found = false;
    for (const std::string& n : names) found |= n == key || n.rfind(key + "/", 0) == 0;
    if (!found) node.child(key).fail(fmt::format("placement names '{}', which is not a layer or block of the model{}", key,
                                                 cfg::suggestion(key, names)));
    wanted[key] = label;
  }
  Placement p;
  std::map<std::string, int> device_index, layer_device;
  auto device = [&](const std::string& label) {
    auto it = device_index.find(label);
    if (it != device_index.end()) return it->second;
    device_index[label] = int(p.devices.size());
    p.devices.push_back(label);
    return int(p.devices.size()) - 1;
  };
  const std::string first_named = node.child(node.keys()[0]).as<std::string>();  // in file order
  for (const LayerDef& d : spec.layers) {
    // The most specific entry: the layer itself, else its innermost enclosing block.
    std::string label;
    for (std::string scope = d.name;;) {
      auto it = wanted.find(scope);
      if (it != wanted.end()) {
        label = it->second;
        break;
      }
      size_t slash = scope.rfind('/');
      if (slash == std::string::npos) break;
      scope = scope.substr(0, slash);
    }
    int dev;
    if (!label.empty()) {
      dev = device(label);
    } else {
      const std::string& in = d.inputs[0];
      dev = spec.input_index(in) >= 0 ? device(first_named) : layer_device.at(in);
    }
    layer_device[d.name] = dev;
    p.layer_device.push_back(dev);
  }
  // A tied kernel (dense `tie:`) is its embedding's table: both layers on one device.
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerDef& d = spec.layers[i];
    const cfg::Node& c = d.config.defined() ? d.config : d.node;
    if (!c.is_map() || !c.has("tie") || !d.activation_of.empty()) continue;
    auto owner = layer_device.find(c.child("tie").as<std::string>());
    if (owner != layer_device.end() && owner->second != p.layer_device[i])
      c.child("tie").fail(fmt::format("layer '{}' (on {}) ties its kernel to '{}' (on {}): place both on one device",
                                      d.name, p.devices[size_t(p.layer_device[i])], owner->first,
                                      p.devices[size_t(owner->second)]));
  }
  return p;
}

std::vector<Stage> make_stages(const ModelSpec& spec, const Placement& p, const std::vector<Shape>& shapes) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < spec.layers.size(); ++i) index[spec.layers[i].name] = i;
  std::vector<Stage> stages(p.devices.size());
  for (size_t s = 0; s < stages.size(); ++s) stages[s].device = int(s);
  // Inputs first (model inputs, then received activations, each once), in the order first read.
  std::vector<std::set<std::string>> have(stages.size());
  std::vector<std::vector<ModelInput>> received(stages.size());
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerDef& d = spec.layers[i];
    Stage& st = stages[size_t(p.layer_device[i])];
    for (const std::string& in : d.inputs) {
      if (have[size_t(st.device)].count(in)) continue;
      int k = spec.input_index(in);
      if (k >= 0) {
        st.spec.inputs.push_back(spec.inputs[size_t(k)]);
        st.model_inputs.push_back(k);
        have[size_t(st.device)].insert(in);
      } else if (p.layer_device[index.at(in)] != st.device) {
        received[size_t(st.device)].push_back({in, shapes[index.at(in)], d.node});
        have[size_t(st.device)].insert(in);
      }
    }
    st.spec.layers.push_back(d);
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    Stage& st = stages[s];
    for (ModelInput& in : received[s]) {
      st.spec.inputs.push_back(in);
      st.model_inputs.push_back(-1);
    }
    if (st.spec.layers.empty()) continue;
    st.spec.output = st.spec.layers.back().name;
    for (const LayerDef& d : st.spec.layers)
      if (d.name == spec.output) st.spec.output = d.name;
    int64_t total = 0;
    for (const ModelInput& in : st.spec.inputs) total += in.shape.numel();
    st.spec.input = st.spec.inputs.size() == 1 ? st.spec.inputs[0].shape : Shape{total};
    // What other stages read from this one.
    for (size_t j = 0; j < st.spec.layers.size(); ++j) {
      const std::string& name = st.spec.layers[j].name;
      bool sent = false;
      for (size_t o = 0; o < stages.size() && !sent; ++o)
        if (o != s)
          for (const ModelInput& in : received[o]) sent |= in.name == name;
      if (sent) st.sends.push_back(int(j));
    }
  }
  return stages;
}

}  // namespace trainer
