// Keras-style model summary: layer (type), output shape, parameters, inputs; totals and FLOPs;
// for a device-parallel model each layer's device and the memory each device holds.
#pragma once
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/graph/placement.h"

namespace trainer {

// `placement` (may be null): adds a device column and per-device parameter and activation
// memory for batches of `batch`.
std::string model_summary(const Graph& g, const std::string& name, const Placement* placement = nullptr, int64_t batch = 0);
std::string with_thousands(int64_t v);

// What each device of a placement holds (values, f32): its parameters (a shared layer's once per
// device using it) and, per sample, its outputs and their gradients plus the copies it receives
// (model inputs, other devices' activations and their gradients).
struct DeviceMemory {
  std::string device;
  int64_t params = 0, activations_per_sample = 0;
};
std::vector<DeviceMemory> memory_per_device(const Graph& g, const Placement& placement);

}  // namespace trainer
