// The layer registry.
#include "core/graph/layer.h"

#include <map>

namespace trainer {

static std::map<std::string, LayerInfo>& layer_table() {
  static std::map<std::string, LayerInfo> t;
  return t;
}

void register_layer(const std::string& type, LayerInfo info) { layer_table()[type] = std::move(info); }

const LayerInfo* find_layer(const std::string& type) {
  auto it = layer_table().find(type);
  return it == layer_table().end() ? nullptr : &it->second;
}

std::vector<std::string> layer_types() {
  std::vector<std::string> out;
  for (const auto& [k, v] : layer_table()) out.push_back(k);
  return out;
}

}  // namespace trainer
