// CheckpointWeights: parameters by name from a checkpoint, checked against the model.
#include "core/export/weights.h"

#include <fmt/format.h>

#include <set>

#include "core/io/config.h"

namespace trainer::onnx_export {

namespace {
bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
}  // namespace

CheckpointWeights::CheckpointWeights(const CheckpointInfo& c, const ParamLayout& layout, bool prefer_average)
    : st_(c.weights_bytes ? SafeTensorsReader(c.weights, c.weights_bytes) : SafeTensorsReader(c.weights)) {
  if (prefer_average)
    for (const SafeTensor& t : st_.tensors()) average_ = average_ || starts_with(t.name, "ema/");
  auto mismatch = [&](const std::string& why) {
    return cfg::ConfigError(c.weights, why + " (does the config match the checkpoint?)");
  };
  std::set<std::string> mine;
  for (const ParamEntry& p : layout.entries()) mine.insert(p.name);
  for (const SafeTensor& t : st_.tensors())
    if (!is_state_tensor(t.name) && !mine.count(t.name))
      throw mismatch(fmt::format("'{}' in the checkpoint is not a parameter of the model", t.name));
  for (const ParamEntry& p : layout.entries()) {
    const std::string name = average_ ? ema_tensor_name(p.name) : p.name;
    const SafeTensor* t = st_.find(name);
    if (!t) throw mismatch(fmt::format("no tensor '{}' for the model's parameter", name));
    if (t->shape != p.spec.shape.dims())
      throw mismatch(fmt::format("'{}' has shape {}, the model's is {}", name, Shape(t->shape).str(), p.spec.shape.str()));
  }
}

std::vector<float> CheckpointWeights::get(const ParamEntry& p) const {
  return st_.f32(average_ ? ema_tensor_name(p.name) : p.name);
}

}  // namespace trainer::onnx_export
