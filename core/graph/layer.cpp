// The layer registry and LayerConfig (a layer's configuration as plain values).
#include "core/graph/layer.h"

#include <map>
#include <stdexcept>

namespace trainer {

LayerConfig& LayerConfig::put_int(const std::string& key, int64_t v) {
  values_[key] = v;
  return *this;
}
LayerConfig& LayerConfig::put_real(const std::string& key, double v) {
  values_[key] = v;
  return *this;
}
LayerConfig& LayerConfig::put_text(const std::string& key, std::string v) {
  values_[key] = std::move(v);
  return *this;
}

template <class T>
static const T& config_value(const std::map<std::string, std::variant<int64_t, double, std::string>>& m,
                             const std::string& key, const char* kind) {
  auto it = m.find(key);
  if (it == m.end()) throw std::logic_error("layer description has no '" + key + "'");
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  throw std::logic_error("layer description's '" + key + "' is not " + kind);
}

int64_t LayerConfig::integer(const std::string& key) const { return config_value<int64_t>(values_, key, "an integer"); }
double LayerConfig::real(const std::string& key) const { return config_value<double>(values_, key, "a number"); }
const std::string& LayerConfig::text(const std::string& key) const {
  return config_value<std::string>(values_, key, "a text");
}

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
