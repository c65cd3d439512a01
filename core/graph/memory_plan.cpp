// Graph memory plans: in-place nodes and the sharing of output-gradient buffers in backward.
#include "core/graph/memory_plan.h"

#include <algorithm>
#include <cstdint>

namespace trainer {

// Output gradients share memory where their lifetimes in backward do not overlap. Backward runs
// the nodes from the last to the first; node j's gradient is live from the backward of its
// last consumer (which writes it first) to its own backward (which reads it last), or from the
// start when no node of this graph consumes it (the loss or another device writes it). A node's
// backward reads its gradient while writing its inputs', so those never share. Returns each
// node's buffer and, in `sizes`, each buffer's length in bytes. A node run in place (over[i] =
// j) also computes its input's gradient over its own (element-wise, so dx may alias dy): j takes
// over i's buffer, which nothing else can have claimed, since it is busy until i's backward and
// j's gradient starts there. A gradient has its node's output type.
std::vector<size_t> plan_gradients(const std::vector<GraphNode>& nodes, const std::vector<int>& over,
                                   const std::vector<DType>& dtypes, int64_t batch, std::vector<int64_t>& sizes) {
  const size_t n = nodes.size();
  std::vector<size_t> last_consumer(n, 0);
  std::vector<bool> consumed(n, false);
  for (size_t i = 0; i < n; ++i)
    for (int j : nodes[i].inputs)
      if (!is_model_input(j)) {
        last_consumer[size_t(j)] = std::max(last_consumer[size_t(j)], i);
        consumed[size_t(j)] = true;
      }
  // In backward time t = n - 1 - i: live over [start, end].
  std::vector<size_t> start(n), end(n), order(n);
  for (size_t j = 0; j < n; ++j) {
    start[j] = consumed[j] ? n - 1 - last_consumer[j] : 0;
    end[j] = n - 1 - j;
    order[j] = j;
  }
  // By start; among equal starts the later node first, so an in-place node precedes its input.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return start[a] != start[b] ? start[a] < start[b] : a > b; });
  std::vector<size_t> buffer(n), busy_until;  // per buffer: the end of its current occupant
  std::vector<int> in_place_by(n, -1);          // per node: its consumer that runs in place on it
  for (size_t i = 0; i < n; ++i)
    if (over[i] >= 0) in_place_by[size_t(over[i])] = int(i);
  sizes.clear();
  for (size_t j : order) {
    const int64_t need = nodes[j].shape.numel() * batch * int64_t(dtype_size(dtypes[j]));
    if (in_place_by[j] >= 0) {
      buffer[j] = buffer[size_t(in_place_by[j])];
      sizes[buffer[j]] = std::max(sizes[buffer[j]], need);
      busy_until[buffer[j]] = end[j];
      continue;
    }
    // The smallest free buffer that is large enough, else the largest free one (grown).
    size_t pick = SIZE_MAX;
    for (size_t b = 0; b < sizes.size(); ++b) {
      if (busy_until[b] >= start[j]) continue;
      if (pick == SIZE_MAX) {
        pick = b;
        continue;
      }
      bool fits = sizes[b] >= need, pick_fits = sizes[pick] >= need;
      if ((fits && (!pick_fits || sizes[b] < sizes[pick])) || (!fits && !pick_fits && sizes[b] > sizes[pick])) pick = b;
    }
    if (pick == SIZE_MAX) {
      pick = sizes.size();
      sizes.push_back(0);
      busy_until.push_back(0);
    }
    sizes[pick] = std::max(sizes[pick], need);
    busy_until[pick] = end[j];
    buffer[j] = pick;
  }
  return buffer;
}

// Per node, the node whose output buffer it overwrites (in-place layers, see Layer::in_place),
// else -1. Never the output node: the engine reads its input as the loss's logits. Never across
// types (the input is then converted, and its producer's output must stay).
std::vector<int> plan_in_place(const std::vector<GraphNode>& nodes, const std::vector<DType>& dtypes, int output) {
  std::vector<int> over(nodes.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    if (int(i) == output || !n.layer->in_place() || n.inputs.size() != 1 || is_model_input(n.inputs[0])) continue;
    const GraphNode& p = nodes[size_t(n.inputs[0])];
    if (n.inputs[0] != output && p.consumers == 1 && p.layer->output_reusable() && dtypes[i] == dtypes[size_t(n.inputs[0])])
      over[i] = n.inputs[0];
  }
  return over;
}

}  // namespace trainer
