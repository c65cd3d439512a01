// Keras-style model summary: layer (type), output shape, parameters, inputs; totals and FLOPs;
// for a device-parallel model each layer's device and the memory each device holds.
#pragma once
#include <string>

#include "core/graph/graph.h"
#include "core/graph/placement.h"

namespace trainer {

// `placement` (may be null): adds a device column and per-device parameter and activation
// memory for batches of `batch`.
std::string model_summary(const Graph& g, const std::string& name, const Placement* placement = nullptr, int64_t batch = 0);
std::string with_thousands(int64_t v);

}  // namespace trainer
