// Graph: a replica's instance of a ModelSpec — layers in topological order, shapes, the
// parameter store, activation/gradient buffers, and the forward/backward passes.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/layer.h"
#include "core/graph/model_spec.h"
#include "core/graph/param_store.h"
#include "core/ops/elementwise.h"

namespace trainer {

struct GraphNode {
  std::unique_ptr<Layer> layer;
  std::vector<int> inputs;  // node indices; -1 - k is model input k
  Shape shape;              // output shape without batch
  std::vector<size_t> params;  // indices into the ParamStore
  int shares = -1;          // the node whose parameters this one uses (`share:`), else -1
  std::vector<int> sharers; // the nodes that use this node's parameters
  int consumers = 0;
};

// Model input k is node index -1 - k in GraphNode::inputs.
inline bool is_model_input(int j) { return j < 0; }
inline int model_input_index(int j) { return -1 - j; }

// Calls around each layer of a pass (device parallelism moves activations and gradients
// between devices from here). Any may be empty.
struct GraphHooks {
  std::function<void(int node)> before_forward, after_forward;
  // before_backward(i) comes before node i's gradient is read (add_grad may still add to it);
  // after_backward(i) after node i's backward (or its skipping, when no gradient reached it).
  std::function<void(int node)> before_backward, after_backward;
};

class Graph {
 public:
  // Instantiates every layer, checks input counts and infers shapes (config errors are thrown
  // with the offending layer's location) and lays out the parameters. No device memory yet.
  explicit Graph(const ModelSpec& spec);

  // Allocates parameters (initialised from `seed`) and binds the layers to a device context.
  void bind(OpContext& ctx, uint64_t seed);
  // Binds to the parameters (and gradients) of `owner`, a graph of the same spec on the same
  // context: a second set of activations and layer state for the same model (micro-batches).
  void bind_shared(OpContext& ctx, Graph& owner);

  const std::vector<GraphNode>& nodes() const { return nodes_; }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  int output_node() const { return output_; }
  const Shape& output_shape() const { return nodes_[size_t(output_)].shape; }
  int node_index(const std::string& name) const;  // -1 when absent
  ParamStore& params() { return *store_; }
  const ParamStore& params() const { return *store_; }
  int64_t flops_per_sample() const;  // forward

  // Runs the layers up to and including `until` (default: the output node); one tensor per
  // model input, [N, ...input shape].
  void forward(const std::vector<const Tensor*>& inputs, bool training, int until = -1);
  void forward(const Tensor& x, bool training, int until = -1) { forward(std::vector<const Tensor*>{&x}, training, until); }
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
  // not overlap share memory: valid from its consumers' backward (or, for a node nothing in this
  // graph consumes, from the start of backward) until its own backward.
  Tensor& grad(int node) { return grads_[size_t(node)]; }
  // Bytes held for output gradients at the current batch size (after a forward).
  int64_t gradient_bytes() const {
    int64_t n = 0;
    for (const Tensor& t : grad_pool_) n += int64_t(t.bytes());
    return n;
  }
  // Bytes held for outputs (activations) at the current batch size (after a forward), with the
  // converted copies of mixed precision; an in-place layer's output shares its input's buffer
  // (Layer::in_place).
  int64_t activation_bytes() const {
    int64_t n = 0;
    auto bytes = [](const Tensor& t) { return t.defined() ? int64_t(t.bytes()) : 0; };
    for (size_t i = 0; i < acts_.size(); ++i) n += (in_place_of_[i] < 0 ? bytes(acts_[i]) : 0) + bytes(cast_[i]);
    for (const Tensor& t : input_cast_) n += bytes(t);
    return n;
  }
  // Mixed precision (precision bf16, Layer::mixed_precision): the type of node's output and
  // output gradient (after a forward; f32 under fp32). keep_f32 makes a node's output f32 whatever
  // its layer allows: the graph's output, and what the engine reads or sends elsewhere (the
  // loss's logits, device-parallel boundaries). The graph converts an input whose type is not the
  // type its consumer computes in, once per pass, into a copy kept for backward; its gradient is
  // converted back (or added) into the producer's. A kept node also takes in no fused activation
  // (its output is read as it is).
  DType dtype(int node) const { return dtypes_.at(size_t(node)); }
  // The node whose layer applies this activation node's function in its own pass
  // (Layer::fuse_activation: batch norm + ReLU on the CPU), else -1; after a forward.
  int fused_into(int node) const { return fused_into_.at(size_t(node)); }
  void keep_f32(int node) {
    keep_f32_.at(size_t(node)) = true;
    batch_ = -1;
  }
  // Gradients with respect to model input k are computed when asked for (device parallelism:
  // an input that is another device's activation); valid after the last consumer's backward.
  void set_input_grad(int k, bool on);
  const Tensor& input_grad(int k) const { return input_grads_[size_t(k)]; }
  bool input_grad_written(int k) const { return input_grad_written_[size_t(k)]; }
  void set_hooks(GraphHooks h) { hooks_ = std::move(h); }
  // Called during backward each time the gradients of every trainable parameter at flat offset
  // >= `frontier` are final (parameters are laid out in layer order, so backward finishes them
  // from the end of the gradient buffer towards 0); the last call has frontier 0. Data
  // parallelism starts a bucket's all-reduce from here while backward goes on.
  void set_backward_hook(std::function<void(int64_t frontier)> hook) { hook_ = std::move(hook); }
  void set_step_seed(uint64_t seed);
  // Per-node wall time of forward and backward, accumulated while profiling is on (the context
  // is synchronised around every layer, so this slows training down: for `trainer bench`).
  void set_profiling(bool on);
  struct LayerTime {
    double forward = 0, backward = 0;  // seconds
  };
  const std::vector<LayerTime>& layer_times() const { return times_; }

 private:
  void bind_layers(OpContext& ctx);
  void ensure_buffers(int64_t batch);
  void plan_precision();
  void plan_fusion();
  const Tensor& input_as(int i, int j);  // node i's input j (a node or model input) as node i computes
  void zero_param_grads(const GraphNode& n, int node);
  void run_backward(int from, const Tensor* dy_from);
  void finish_params(int node);  // adds sharers' gradients into the owner's

  std::vector<GraphNode> nodes_;
  std::vector<Shape> input_shapes_;
  std::vector<std::string> input_names_;
  int output_ = -1;
  std::shared_ptr<ParamStore> store_;
  OpContext* ctx_ = nullptr;
  std::vector<const Tensor*> inputs_;
  int64_t batch_ = -1;
  std::vector<Tensor> acts_, grads_;  // grads_: views into grad_pool_ (shared where lifetimes allow)
  std::vector<int> in_place_of_;      // per node: the node whose output buffer it overwrites, or -1
  std::vector<bool> keep_f32_;        // per node (keep_f32)
  std::vector<int> fused_into_;       // per node (fused_into)
  std::vector<DType> dtypes_;         // per node: output type
  std::vector<DType> input_dtypes_;   // per model input, at the last planning
  // Per node and per model input: the output converted to the other float type when a consumer
  // computes in that type (else undefined), and whether this pass has converted it yet.
  std::vector<Tensor> cast_, input_cast_;
  std::vector<bool> cast_done_, input_cast_done_;
  std::vector<Tensor> grad_pool_;
  std::vector<std::vector<Tensor>> shadow_;  // per node: the gradients of a sharer's own use
  std::vector<bool> input_grad_on_, input_grad_written_;
  std::vector<Tensor> input_grads_;
  Tensor scratch_;  // bytes: for an input gradient computed apart (a second contribution, or another type)
  std::vector<bool> grad_written_;
  std::unique_ptr<ElementwiseKernel> elementwise_;
  std::function<void(int64_t)> hook_;
  GraphHooks hooks_;
  std::vector<int64_t> frontier_;  // per node: lowest trainable offset of this node and later ones
  bool profiling_ = false;
  std::vector<LayerTime> times_;
};

}  // namespace trainer
