// Planning a graph's execution: precision per node, in-place nodes, fusions, channel slices,
// gradient buffer sharing, and the arena offsets of every buffer.
#include "core/graph/execution_plan.h"

#include <algorithm>
#include <cstdint>

namespace trainer {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

int64_t align64(int64_t n) { return (std::max<int64_t>(n, 1) + 63) / 64 * 64; }

// Each node's output type (Layer::mixed_precision) from the precision's low type and the model
// inputs' types; everything is f32 under fp32 and at nodes kept f32.
std::vector<DType> plan_precision(const Graph& g, const ExecutionInputs& in) {
  const bool mixed = in.low != DType::F32;
  const auto& nodes = g.nodes();
  std::vector<DType> dtypes(nodes.size(), DType::F32);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    const MixedPrecision mp = mixed && !in.keep_f32[i] ? n.layer->mixed_precision() : MixedPrecision::F32;
    bool all_low = true;
    for (int j : n.inputs)
      all_low &= (is_model_input(j) ? in.input_dtypes[size_t(model_input_index(j))] : dtypes[size_t(j)]) == in.low;
    if (mp == MixedPrecision::Low || (mp == MixedPrecision::Follow && all_low)) dtypes[i] = in.low;
  }
  return dtypes;
}

// Per node, the node whose output buffer it overwrites (in-place layers, see Layer::in_place),
// else -1. Never the output node: the engine reads its input as the loss's logits. Never across
// types (the input is then converted, and its producer's output must stay). An identity (a
// folded zero_pad2d) changes nothing it runs over, so its producer need not be output_reusable.
std::vector<int> plan_in_place(const Graph& g, const std::vector<DType>& dtypes, size_t runs) {
  const auto& nodes = g.nodes();
  const int output = g.output_node();
  std::vector<int> over(nodes.size(), -1);
  for (size_t i = 0; i < runs; ++i) {
    const GraphNode& n = nodes[i];
    const bool identity = n.layer->identity();
    if (int(i) == output || !(n.layer->in_place() || identity) || n.inputs.size() != 1 || is_model_input(n.inputs[0])) continue;
    const GraphNode& p = nodes[size_t(n.inputs[0])];
    if (n.inputs[0] != output && p.consumers == 1 && (identity || p.layer->output_reusable()) &&
        dtypes[i] == dtypes[size_t(n.inputs[0])])
      over[i] = n.inputs[0];
  }
  return over;
}

// Channel slices (ExecutionPlan::slice_of): a concat input written in the concat's output by the
// layer that computes it — the input itself, or the producer it is fused into (batch norm with its
// ReLU) — when that layer writes_channel_slice, the input is read by the concat only (not from
// outside: keep_f32, not the output node), all three share a type, the writer owns its buffer (runs
// in place over nothing) and no consumer runs in place over the concat's output (which would
// overwrite the slices a fused activation's backward may read).
void plan_slices(const Graph& g, const ExecutionInputs& in, size_t runs, ExecutionPlan& p) {
  const auto& nodes = g.nodes();
  const size_t n = nodes.size();
  p.slice_of.assign(n, -1);
  p.slice_channel.assign(n, 0);
  if (!in.can_slice) return;
  std::vector<bool> overwritten(n, false);
  for (size_t i = 0; i < n; ++i)
    if (p.in_place_of[i] >= 0) overwritten[size_t(p.in_place_of[i])] = true;
  const int output = g.output_node();
  for (size_t c = 0; c < runs; ++c) {
    const GraphNode& cn = nodes[c];
    if (!cn.layer->joins_channels() || overwritten[c]) continue;
    int64_t channel = 0;
    for (int k : cn.inputs) {
      const int64_t width = is_model_input(k) ? 0 : nodes[size_t(k)].shape.back();
      const int64_t at = channel;
      channel += width;
      if (is_model_input(k) || std::count(cn.inputs.begin(), cn.inputs.end(), k) != 1) continue;
      const size_t ku = size_t(k);
      const int over = p.in_place_of[ku];
      const int w = over < 0 ? k : (p.fused_into[ku] == over ? over : -1);  // the layer that writes k's output
      if (w < 0 || p.in_place_of[size_t(w)] >= 0 || p.slice_of[size_t(w)] >= 0) continue;
      if (nodes[ku].consumers != 1 || k == output || w == output || in.keep_f32[ku] || in.keep_f32[size_t(w)]) continue;
      if (p.dtypes[ku] != p.dtypes[c] || p.dtypes[size_t(w)] != p.dtypes[c] || !in.can_slice(w)) continue;
      for (int s : {k, w}) {
        p.slice_of[size_t(s)] = int(c);
        p.slice_channel[size_t(s)] = at;
      }
    }
  }
}

// Sibling groups (ExecutionPlan::sibling_leader): for each concat whose every input is a channel
// slice, the layers that write them (the input, or the producer its activation is fused into), when
// each can join siblings, all share one layer type, output type and fused activation, own their
// parameters, and read one node's output that only they read, in their own type (their input
// gradient is theirs alone, and is written at the leader's backward).
void plan_siblings(const Graph& g, const ExecutionInputs& in, size_t runs, ExecutionPlan& p) {
  const auto& nodes = g.nodes();
  const size_t n = nodes.size();
  p.sibling_leader.assign(n, -1);
  if (!in.can_join) return;
  for (size_t c = 0; c < runs; ++c) {
    const GraphNode& cn = nodes[c];
    if (!cn.layer->joins_channels() || cn.inputs.size() < 2) continue;
    std::vector<int> writers;
    bool ok = true;
    for (int k : cn.inputs) {
      if (is_model_input(k) || p.slice_of[size_t(k)] != int(c)) {
        ok = false;
        break;
      }
      const int over = p.in_place_of[size_t(k)];
      const int w = over < 0 ? k : over;  // a slice's writer (plan_slices)
      const GraphNode& wn = nodes[size_t(w)];
      ok = p.slice_of[size_t(w)] == int(c) && wn.shares < 0 && wn.sharers.empty() && wn.inputs.size() == 1 &&
           !is_model_input(wn.inputs[0]) && nodes[size_t(wn.inputs[0])].consumers == 1 &&
           p.dtypes[size_t(wn.inputs[0])] == p.dtypes[size_t(w)] && in.can_join(w);
      if (ok && !writers.empty()) {
        const size_t f = size_t(writers[0]);
        ok = wn.layer->type() == nodes[f].layer->type() && p.dtypes[size_t(w)] == p.dtypes[f] &&
             p.applies[size_t(w)] == p.applies[f];
      }
      if (!ok) break;
      writers.push_back(w);
    }
    if (!ok) continue;
    const int leader = *std::max_element(writers.begin(), writers.end());
    for (int w : writers) p.sibling_leader[size_t(w)] = leader;
  }
}

// Output gradients share memory where their lifetimes in backward do not overlap. Backward runs
// the nodes from the last to the first; node j's gradient is live from the backward of its
// last consumer (which writes it first) to its own backward (which reads it last), or from the
// start when no node of this graph consumes it (the loss or another device writes it). A node's
// backward reads its gradient while writing its inputs', so those never share. Returns each
// node's buffer and, in `sizes`, each buffer's length in bytes. A node run in place (over[i] =
// j) also computes its input's gradient over its own (element-wise, so dx may alias dy): j takes
// over i's buffer, which nothing else can have claimed, since it is busy until i's backward and
// j's gradient starts there. A gradient has its node's output type. A channel slice (slice_of)
// has no buffer of its own (its concat's holds it, SIZE_MAX in the result), and its concat's
// gradient stays live until the slice's backward. A sibling group's member (leader[i] >= 0) writes
// its input's gradient at its leader's backward. Nodes from `runs` on never run: no buffer
// (SIZE_MAX), and their reading of a node does not count. A node whose gradient a consumer passes
// through (grad_over[j] = i) takes i's buffer as an in-place one does: i is j's last consumer, so
// j's gradient starts where i's ends.
std::vector<size_t> plan_gradients(const std::vector<GraphNode>& nodes, size_t runs, const std::vector<int>& over,
                                   const std::vector<int>& slice_of, const std::vector<int>& leader,
                                   const std::vector<int>& grad_over, const std::vector<DType>& dtypes, int64_t batch,
                                   std::vector<int64_t>& sizes) {
  const size_t n = nodes.size();
  std::vector<size_t> last_consumer(n, 0);
  std::vector<bool> consumed(n, false);
  for (size_t i = 0; i < runs; ++i)
    for (int j : nodes[i].inputs)
      if (!is_model_input(j)) {
        const size_t at = leader[i] >= 0 ? size_t(leader[i]) : i;  // where i's backward writes j's gradient
        last_consumer[size_t(j)] = std::max(last_consumer[size_t(j)], at);
        consumed[size_t(j)] = true;
      }
  // In backward time t = n - 1 - i: live over [start, end].
  std::vector<size_t> start(n), end(n), order(n);
  for (size_t j = 0; j < n; ++j) {
    start[j] = consumed[j] ? n - 1 - last_consumer[j] : 0;
    end[j] = n - 1 - j;
    order[j] = j;
  }
  for (size_t j = 0; j < n; ++j)
    if (slice_of[j] >= 0) end[size_t(slice_of[j])] = std::max(end[size_t(slice_of[j])], end[j]);
  // By start; among equal starts the later node first, so an in-place node precedes its input.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return start[a] != start[b] ? start[a] < start[b] : a > b; });
  std::vector<size_t> buffer(n), busy_until;  // per buffer: the end of its current occupant
  std::vector<int> in_place_by(n, -1);          // per node: its consumer that runs in place on it
  for (size_t i = 0; i < n; ++i)
    if (over[i] >= 0) in_place_by[size_t(over[i])] = int(i);
  sizes.clear();
  for (size_t j : order) {
    if (slice_of[j] >= 0 || j >= runs) {
      buffer[j] = SIZE_MAX;
      continue;
    }
    const int64_t need = nodes[j].shape.numel() * batch * int64_t(dtype_size(dtypes[j]));
    if (in_place_by[j] >= 0 || grad_over[j] >= 0) {  // the consumer's buffer, free from its backward on
      buffer[j] = buffer[size_t(in_place_by[j] >= 0 ? in_place_by[j] : grad_over[j])];
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

// Gradients passed through (ExecutionPlan::grad_over): node j's gradient in its last consumer i's
// buffer where i's layer writes it as i's own gradient unchanged (a residual add), so that i's
// backward copies nothing. Neither buffer is placed by another rule (in place, slices, sibling
// groups), j is read once by i, and the two have one type.
void plan_pass_through(const Graph& g, const ExecutionInputs& in, size_t runs, ExecutionPlan& p) {
  const auto& nodes = g.nodes();
  const size_t n = nodes.size();
  p.grad_over.assign(n, -1);
  if (!in.can_pass_grad) return;
  // Where each node's gradient is first written: its last consumer's backward (a sibling group's
  // member writes at its leader's), as plan_gradients counts it.
  std::vector<int> last_consumer(n, -1), in_place_by(n, -1);
  for (size_t i = 0; i < runs; ++i) {
    const int at = p.sibling_leader[i] >= 0 ? p.sibling_leader[i] : int(i);
    for (int j : nodes[i].inputs)
      if (!is_model_input(j)) last_consumer[size_t(j)] = std::max(last_consumer[size_t(j)], at);
    if (p.in_place_of[i] >= 0) in_place_by[size_t(p.in_place_of[i])] = int(i);
  }
  // The consumer's gradient buffer is its own (not its input's, not a concat's); the input's is
  // not claimed by an in-place consumer, a concat or a sibling group. (Either may have an in-place
  // neighbour on its other side: that one takes the buffer in its turn.)
  auto owns = [&](size_t i) { return p.in_place_of[i] < 0 && p.slice_of[i] < 0 && p.sibling_leader[i] < 0; };
  auto free = [&](size_t j) { return in_place_by[j] < 0 && p.slice_of[j] < 0 && p.sibling_leader[j] < 0; };
  for (size_t i = 0; i < runs; ++i) {
    if (!owns(i)) continue;
    const auto& ins = nodes[i].inputs;
    for (size_t k = 0; k < ins.size(); ++k) {
      const int j = ins[k];
      if (is_model_input(j) || last_consumer[size_t(j)] != int(i) || !free(size_t(j))) continue;
      if (p.dtypes[size_t(j)] != p.dtypes[i] || std::count(ins.begin(), ins.end(), j) != 1) continue;
      if (!in.can_pass_grad(int(i), int(k))) continue;
      p.grad_over[size_t(j)] = int(i);
      break;
    }
  }
}

}  // namespace

ExecutionPlan plan_execution(const Graph& g, const ExecutionInputs& in) {
  const auto& nodes = g.nodes();
  const size_t n = nodes.size(), inputs = g.input_shapes().size();
  ExecutionPlan p;
  p.batch = in.batch;
  p.input_dtypes = in.input_dtypes;
  p.dtypes = plan_precision(g, in);
  // The nodes that run: [0, runs).
  const size_t runs = in.last < 0 ? n : std::min(n, size_t(in.last) + 1);
  p.in_place_of = plan_in_place(g, p.dtypes, runs);

  // An activation running in place over a producer that can apply it is done by the producer:
  // one pass over the data instead of two, forward and backward. Not into a node read from
  // outside (keep_f32), whose output must be its own.
  p.fused_into.assign(n, -1);
  p.applies.assign(n, std::nullopt);
  for (size_t i = 0; i < n; ++i) {
    const int j = p.in_place_of[i];
    const std::optional<ActKind> act = nodes[i].layer->activation();
    if (j < 0 || in.keep_f32[size_t(j)] || !act || p.applies[size_t(j)]) continue;
    if (in.can_fuse && in.can_fuse(j, *act)) {
      p.fused_into[i] = j;
      p.applies[size_t(j)] = act;
    }
  }
  plan_slices(g, in, runs, p);
  plan_siblings(g, in, runs, p);
  plan_pass_through(g, in, runs, p);

  int64_t cursor = 0;
  auto take = [&](int64_t bytes) {
    Region r{cursor, bytes};
    cursor += align64(bytes);
    return r;
  };
  auto bytes_of = [&](const Shape& s, DType t) { return s.numel() * in.batch * int64_t(dtype_size(t)); };
  auto shape_of = [&](int j) { return is_model_input(j) ? g.input_shapes()[size_t(model_input_index(j))] : nodes[size_t(j)].shape; };

  // Outputs; an in-place node writes its input's region, a channel slice its concat's.
  auto slice = [&](size_t i, const Region& whole) {
    const size_t c = size_t(p.slice_of[i]);
    const int64_t esz = int64_t(dtype_size(p.dtypes[i]));
    return Region{whole.offset + p.slice_channel[i] * esz, bytes_of(nodes[i].shape, p.dtypes[i]),
                  nodes[c].shape.back()};
  };
  p.act.assign(n, Region{});
  for (size_t i = 0; i < runs; ++i)
    if (p.slice_of[i] < 0)
      p.act[i] = p.in_place_of[i] >= 0 ? p.act[size_t(p.in_place_of[i])] : take(bytes_of(nodes[i].shape, p.dtypes[i]));
  for (size_t i = 0; i < runs; ++i)
    if (p.slice_of[i] >= 0) p.act[i] = slice(i, p.act[size_t(p.slice_of[i])]);
  // Converted copies (in the reader's type), and the scratch for input gradients computed apart:
  // at most every input of one node at once, in that node's type (64-byte aligned pieces).
  p.cast.assign(n, Region{});
  p.input_cast.assign(inputs, Region{});
  int64_t scratch = 64;
  for (size_t i = 0; i < runs; ++i) {
    int64_t need = 0;
    for (int j : nodes[i].inputs) {
      const bool model = is_model_input(j);
      const size_t m = model ? size_t(model_input_index(j)) : size_t(j);
      const DType from = model ? in.input_dtypes[m] : p.dtypes[m];
      need += align64(bytes_of(shape_of(j), p.dtypes[i]));
      if (!is_float(from) || from == p.dtypes[i]) continue;
      Region& cast = model ? p.input_cast[m] : p.cast[m];
      if (!cast.defined()) cast = take(bytes_of(shape_of(j), p.dtypes[i]));
    }
    scratch = std::max(scratch, need);
  }
  p.activation_bytes = cursor;
  // Output gradients: buffers shared where lifetimes allow.
  std::vector<int64_t> sizes;
  const std::vector<size_t> buffer =
      plan_gradients(nodes, runs, p.in_place_of, p.slice_of, p.sibling_leader, p.grad_over, p.dtypes, in.batch, sizes);
  const int64_t grads_at = cursor;
  std::vector<Region> buffers;
  for (int64_t sz : sizes) buffers.push_back(take(sz));
  p.gradient_bytes = cursor - grads_at;
  p.grad.assign(n, Region{});
  for (size_t i = 0; i < runs; ++i)
    if (p.slice_of[i] < 0) p.grad[i] = {buffers[buffer[i]].offset, bytes_of(nodes[i].shape, p.dtypes[i])};
  for (size_t i = 0; i < runs; ++i)
    if (p.slice_of[i] >= 0) p.grad[i] = slice(i, p.grad[size_t(p.slice_of[i])]);
  p.input_grad.assign(inputs, Region{});
  for (size_t k = 0; k < inputs; ++k)
    if (k < in.input_grads.size() && in.input_grads[k])
      p.input_grad[k] = take(bytes_of(g.input_shapes()[k], is_float(in.input_dtypes[k]) ? in.input_dtypes[k] : DType::F32));
  p.scratch = take(scratch);
  p.arena_bytes = cursor;
  return p;
}

}  // namespace trainer
