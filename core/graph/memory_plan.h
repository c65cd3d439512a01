// Graph memory plans: which nodes run in place over their input, and which output gradients
// share one buffer in backward (their lifetimes do not overlap).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/graph/graph.h"

namespace trainer {

// Output gradients share memory where their lifetimes in backward do not overlap (see the
// definition for the rule). Returns each node's buffer and, in `sizes`, each buffer's bytes.
std::vector<size_t> plan_gradients(const std::vector<GraphNode>& nodes, const std::vector<int>& over,
                                   const std::vector<DType>& dtypes, int64_t batch, std::vector<int64_t>& sizes);

// Per node, the node whose output buffer it overwrites (in-place layers), else -1.
std::vector<int> plan_in_place(const std::vector<GraphNode>& nodes, const std::vector<DType>& dtypes, int output);

}  // namespace trainer
