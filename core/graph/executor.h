// Executor: one copy of a Graph on one device — its layers (clones of the graph's, bound to the
// context), its parameters, and one arena holding every activation and gradient of a step at the
// offsets of its ExecutionPlan — running forward and backward as a fixed sequence. After the first
// step of a batch size it allocates nothing (a larger batch grows the arena once).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/execution_plan.h"
#include "core/graph/graph.h"
#include "core/ops/elementwise.h"

namespace trainer {

// Calls around each layer of a pass (device parallelism moves activations and gradients
// between devices from here). Any may be empty.
struct GraphHooks {
  std::function<void(int node)> before_forward, after_forward;
  // before_backward(i) comes before node i's gradient is read (add_grad may still add to it);
  // after_backward(i) after node i's backward (or its skipping, when no gradient reached it).
  std::function<void(int node)> before_backward, after_backward;
};

class Executor {
 public:
  // A copy of `graph` on ctx's device with parameters of its own (initialised from `seed`).
  Executor(std::shared_ptr<const Graph> graph, OpContext& ctx, uint64_t seed);
  // A second set of activations and layer state for `owner`'s parameters (and gradients), on
  // the same context: one per micro-batch.
  Executor(OpContext& ctx, Executor& owner);

  const Graph& graph() const { return *graph_; }
  const std::shared_ptr<const Graph>& graph_ptr() const { return graph_; }
  const std::vector<GraphNode>& nodes() const { return graph_->nodes(); }
  const std::vector<Shape>& input_shapes() const { return graph_->input_shapes(); }
  int output_node() const { return graph_->output_node(); }
  int node_index(const std::string& name) const { return graph_->node_index(name); }
  int64_t flops_per_sample() const { return graph_->flops_per_sample(); }
  // Bytes of the buffers its layers share for work inside one call (Layer::transient).
  size_t transient_bytes() const { return transients_.bytes(); }
  Layer& layer(int node) { return *layers_[size_t(node)]; }
  ParamStore& params() { return *store_; }
  const ParamStore& params() const { return *store_; }
  OpContext& context() { return *ctx_; }

  // Runs the layers up to and including `until` (default: the output node); one tensor per
  // model input, [N, ...input shape].
  void forward(const std::vector<const Tensor*>& inputs, bool training, int until = -1);
  void forward(const Tensor& x, bool training, int until = -1) { forward(std::vector<const Tensor*>{&x}, training, until); }
  // Node's output: a strided view (Tensor::row_stride) where it is a concat's channel slice
  // (ExecutionPlan::slice_of; never a node kept f32, which is what the engine reads).
  const Tensor& output(int node) const { return acts_[size_t(node)]; }
  // Backpropagates from a gradient given for node `from`'s output (skipping layers after it).
  // Parameter gradients are overwritten (the gradient buffer holds this batch's gradient).
  void backward(const Tensor& dy_from, int from);
  // Backpropagates from every node down: gradients come only from add_grad (before the call
  // or from the before_backward hook). Parameter gradients are overwritten.
  void backward_all();
  // Adds `g` to node's output gradient of the current backward pass (the first contribution is
  // copied). Call before backward_all, or from before_backward(node).
  void add_grad(int node, const Tensor& g);
  // Node's output gradient in the current backward pass. Gradients whose lifetimes in backward do
  // not overlap share memory (ExecutionPlan): valid from its consumers' backward (or, for a node
  // nothing in this graph consumes, from the start of backward) until its own backward.
  // (A concat's channel slice's is a strided view into the concat's.)
  Tensor& grad(int node) { return grads_[size_t(node)]; }
  // Bytes of the current plan (after a forward): output gradients; outputs with their converted copies.
  int64_t gradient_bytes() const { return plan_.gradient_bytes; }
  int64_t activation_bytes() const { return plan_.activation_bytes; }
  const ExecutionPlan& plan() const { return plan_; }
  // Mixed precision (precision bf16, Layer::mixed_precision): the type of node's output and
  // output gradient (after a forward; f32 under fp32). keep_f32 makes a node's output f32 whatever
  // its layer allows: the graph's output, and what the engine reads or sends elsewhere (the
  // loss's logits, device-parallel boundaries). The executor converts an input whose type is not
  // the type its consumer computes in, once per pass, into a copy kept for backward; its gradient
  // is converted back (or added) into the producer's. A kept node also takes in no fused activation.
  DType dtype(int node) const { return plan_.dtypes.at(size_t(node)); }
  // The node whose layer applies this activation node's function in its own pass
  // (Layer::fuse_activation: batch norm + ReLU on the CPU), else -1; after a forward.
  int fused_into(int node) const { return plan_.fused_into.at(size_t(node)); }
  void keep_f32(int node);
  // The last node the engine runs (ExecutionInputs::last: the loss's logits, its softmax being the
  // loss's): the nodes after it get no buffers, and forward() refuses to run them; forward() without
  // `until` ends there and backward_all() starts there (last_node(): else the graph's last node).
  void set_last(int node);
  int last_node() const { return last_ >= 0 ? last_ : int(graph_->nodes().size()) - 1; }
  // Whether concat inputs may be written in the concat's output by their producers (channel
  // slices, ExecutionPlan::slice_of; on by default): off, every concat copies, as a reference.
  void set_channel_slices(bool on);
  // Whether a layer that reads_input_as(t) or writes_input_grad_as(k, t) takes an input, or writes
  // its gradient, of another type directly (on by default); off: copies in its node's type,
  // converted by the executor, as a reference.
  void set_typed_io(bool on) { typed_io_ = on; }
  // Whether a layer that passes its gradient through (an add) may write it in its input's gradient
  // buffer, the plan giving both one buffer (ExecutionPlan::grad_over); on by default. Off: copied.
  void set_grad_pass(bool on) {
    grad_pass_ = on;
    replan_ = true;
  }
  // Gradients with respect to model input k are computed when asked for (device parallelism:
  // an input that is another device's activation); valid after the last consumer's backward.
  void set_input_grad(int k, bool on);
  const Tensor& input_grad(int k) const { return input_grads_[size_t(k)]; }
  bool input_grad_written(int k) const { return input_grad_written_[size_t(k)]; }
  void set_hooks(GraphHooks h) { hooks_ = std::move(h); }
  // Called during backward each time the gradients of every trainable parameter at flat offset
  // >= `frontier` are final (Graph::frontier); the last call has frontier 0. Data parallelism
  // starts a bucket's all-reduce from here while backward goes on.
  void set_backward_hook(std::function<void(int64_t frontier)> hook) { hook_ = std::move(hook); }
  const std::function<void(int64_t frontier)>& backward_hook() const { return hook_; }
  void set_step_seed(uint64_t seed);
  // A recorded step: every layer reads the step's seed from `step` where its kernels run (null:
  // back to set_step_seed's values).
  void set_step_scalars(const StepScalars* step);
  // Per-node wall time of forward and backward, accumulated while profiling is on (the context
  // is synchronised around every layer, so this slows training down: for `trainer bench`).
  void set_profiling(bool on);
  bool profiling() const { return profiling_; }
  struct LayerTime {
    double forward = 0, backward = 0;  // seconds: the layer's own passes
    // Seconds adding this node's input gradients into gradients another consumer wrote first (a
    // tensor that feeds several layers), converting them to another type, and summing shared
    // weights' gradients: the executor's work after the layer's backward, not the layer's.
    double sums = 0;
  };
  const std::vector<LayerTime>& layer_times() const { return times_; }

 private:
  void bind_layers();
  void ensure_plan(int64_t batch);
  void apply_fusion();
  Tensor view(const Region& r, const Shape& s, DType t) const;
  const Tensor& input_as(int i, int j);  // node i's input j (a node or model input) as node i computes
  void zero_param_grads(int node);
  void run_backward(int from, const Tensor* dy_from);
  std::vector<int> sibling_members(int leader) const;
  void forward_siblings(int leader, bool training);
  bool backward_siblings(int leader, const Tensor& x, Tensor& dx);
  void finish_params(int node);  // adds sharers' (and tied uses') gradients into the owner's

  std::shared_ptr<const Graph> graph_;
  OpContext* ctx_;
  std::shared_ptr<ParamStore> store_;
  ScratchPool transients_;                       // the layers' transient() buffers (before layers_: outlives them)
  std::vector<std::unique_ptr<Layer>> layers_;  // clones of the graph's, bound to ctx_
  std::vector<const Tensor*> inputs_;
  std::vector<bool> keep_f32_;        // per node (keep_f32)
  int last_ = -1;                     // set_last (-1: the output node)
  std::vector<bool> input_grad_on_;   // per model input (set_input_grad)
  bool channel_slices_ = true;        // set_channel_slices
  bool typed_io_ = true;              // set_typed_io
  bool grad_pass_ = true;             // set_grad_pass
  bool replan_ = true;                // keep_f32, set_last, set_input_grad or set_channel_slices changed since the last plan
  ExecutionPlan plan_;
  Tensor arena_;                      // every buffer of plan_ (grows, never shrinks)
  std::vector<Tensor> acts_, grads_, cast_, input_cast_, input_grads_;  // views into arena_
  Tensor scratch_;
  std::vector<bool> cast_done_, input_cast_done_, grad_written_, input_grad_written_;
  std::vector<bool> siblings_done_;  // per sibling group's leader: this backward ran the group
  std::vector<std::vector<Tensor>> shadow_;  // per node: the gradients of a sharer's own use, or of a tied parameter's
  std::unique_ptr<ElementwiseKernel> elementwise_;
  std::function<void(int64_t)> hook_;
  GraphHooks hooks_;
  bool profiling_ = false;
  std::vector<LayerTime> times_;
};

}  // namespace trainer
