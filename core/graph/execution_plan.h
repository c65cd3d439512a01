// ExecutionPlan: how one copy of a Graph runs at a batch size — each node's precision, which nodes
// run in place and which activations are fused into their producer, which outputs are channel
// slices of a concat's, which output gradients share memory, and every buffer of the step at a
// fixed offset of one arena. A pure function of its
// inputs (unit-tested); the Executor allocates the arena once and runs the step over it.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/graph/graph.h"

namespace trainer {

struct ExecutionInputs {
  int64_t batch = 1;
  DType low = DType::F32;             // the precision's low type (bf16, f16); F32 under fp32
  std::vector<DType> input_dtypes;    // per model input
  std::vector<bool> keep_f32;         // per node: its output stays f32 and takes no fused activation
  std::vector<bool> input_grads;      // per model input: its gradient is computed
  // The last node the engine runs (the loss's logits: the output softmax is the loss's), or -1 for
  // the graph's output. Nodes after it never run and get no buffers: no output, gradient or
  // converted copy, no scratch for their backward; no node before it runs in place of, fuses or
  // writes slices for one after it.
  int last = -1;
  // Whether node `producer`'s layer can apply activation `k` in its own pass (Layer::can_fuse_activation).
  std::function<bool(int producer, ActKind k)> can_fuse;
  // Whether node `producer`'s layer writes its output as a channel slice (Layer::writes_channel_slice);
  // empty: no slices.
  std::function<bool(int producer)> can_slice;
  // Whether node i's layer can run its backward with its siblings' (Layer::joins_siblings);
  // empty: no sibling groups.
  std::function<bool(int node)> can_join;
  // Whether node i's layer passes its output gradient through to its input k unchanged
  // (Layer::passes_grad_through); empty: no gradient takes another's buffer.
  std::function<bool(int node, int k)> can_pass_grad;
};

// A byte range of the arena (offset -1: none). A channel slice's rows are row_stride elements
// apart (its concat's channels) and bytes counts its own elements; 0: contiguous.
struct Region {
  int64_t offset = -1, bytes = 0;
  int64_t row_stride = 0;
  bool defined() const { return offset >= 0; }
};

struct ExecutionPlan {
  int64_t batch = 0;
  std::vector<DType> dtypes;            // per node: the type of its output and output gradient
  std::vector<DType> input_dtypes;      // per model input, as planned
  std::vector<int> in_place_of;         // per node: the node whose output buffer it overwrites, or -1
  std::vector<int> fused_into;          // per activation node: the producer that applies it, or -1
  std::vector<std::optional<ActKind>> applies;  // per node: the activation it applies for a fused consumer
  // Per node: the concat whose output holds this node's output (and whose gradient its gradient)
  // as channels [slice_channel, ...), or -1. A concat input and, when it is an activation fused
  // into its producer, that producer too: the producer writes the slice, the concat copies nothing.
  std::vector<int> slice_of;
  std::vector<int64_t> slice_channel;
  // Per node: the node whose forward and backward run this one's too, in one pass with the other writers of
  // one concat's channels (a sibling group: the writers of all its inputs, in order, joining
  // siblings, of one layer type, type and fused activation, each reading a tensor only it reads),
  // the group's last in forward order (its own leader); -1 outside groups. The members' input
  // gradients are written at the leader's backward, which the gradient buffers' lifetimes count.
  std::vector<int> sibling_leader;
  // Per node: the consumer whose output gradient's buffer this node's gradient takes over, or -1.
  // That consumer passes its gradient through to this input unchanged (can_pass_grad) and is its
  // last consumer, whose backward writes this gradient first, as it reads its own for the last
  // time; both of one type, neither buffer placed by another rule (the consumer not in place, a
  // slice or in a sibling group; the input not taken in place, a slice or in a group); one input
  // per consumer.
  std::vector<int> grad_over;
  std::vector<Region> act;              // per node: its output (an in-place node: its input's region; none after `last`)
  std::vector<Region> cast;             // per node: its output converted to the other float type, when a consumer needs it
  std::vector<Region> input_cast;       // per model input, likewise
  std::vector<Region> grad;             // per node: its output gradient (shared where lifetimes allow)
  std::vector<Region> input_grad;       // per model input whose gradient is computed
  Region scratch;                       // input gradients computed apart (a second contribution, another type)
  int64_t arena_bytes = 0;              // every region above lies in [0, arena_bytes)
  int64_t gradient_bytes = 0;           // the output gradients' buffers
  int64_t activation_bytes = 0;         // outputs and their converted copies
};

// Plans `g` for `in`. Regions are 64-byte aligned; an in-place node's output and gradient are
// its input's, a channel slice's lie in its concat's; two gradients share bytes only when their
// lifetimes in backward do not overlap (a concat's lasts until its slices' backward) or one's
// consumer passes it through (grad_over).
ExecutionPlan plan_execution(const Graph& g, const ExecutionInputs& in);

}  // namespace trainer
