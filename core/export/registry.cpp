// The layer exporter registry.
#include "core/export/registry.h"

#include <map>

namespace trainer::onnx_export {

static std::map<std::string, ExporterInfo>& exporter_table() {
  static std::map<std::string, ExporterInfo> t;
  return t;
}

void register_exporter(const std::string& type, ExporterInfo info) { exporter_table()[type] = std::move(info); }

const ExporterInfo* find_exporter(const std::string& type) {
  auto it = exporter_table().find(type);
  return it == exporter_table().end() ? nullptr : &it->second;
}

std::vector<std::string> exported_types() {
  std::vector<std::string> out;
  for (const auto& [k, v] : exporter_table()) out.push_back(k);
  return out;
}

}  // namespace trainer::onnx_export
