// Keras-style model summary: layer (type), output shape, parameters, inputs; totals and FLOPs.
#pragma once
#include <string>

#include "core/graph/graph.h"

namespace trainer {

std::string model_summary(const Graph& g, const std::string& name);
std::string with_thousands(int64_t v);

}  // namespace trainer
