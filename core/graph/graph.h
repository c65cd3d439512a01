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
  std::vector<int> inputs;  // node indices; -1 is the model input
  Shape shape;              // output shape without batch
  std::vector<size_t> params;  // indices into the ParamStore
  int consumers = 0;
};

class Graph {
 public:
  // Instantiates every layer, checks input counts and infers shapes (config errors are thrown
  // with the offending layer's location) and lays out the parameters. No device memory yet.
  explicit Graph(const ModelSpec& spec);

  // Allocates parameters (initialised from `seed`) and binds the layers to a device context.
  void bind(OpContext& ctx, uint64_t seed);

  const std::vector<GraphNode>& nodes() const { return nodes_; }
  const Shape& input_shape() const { return input_shape_; }
  int output_node() const { return output_; }
  const Shape& output_shape() const { return nodes_[size_t(output_)].shape; }
  int node_index(const std::string& name) const;  // -1 when absent
  ParamStore& params() { return store_; }
  const ParamStore& params() const { return store_; }
  int64_t flops_per_sample() const;  // forward

  // Runs the layers up to and including `until` (default: the output node). x: [N, H, W, C].
  void forward(const Tensor& x, bool training, int until = -1);
  const Tensor& output(int node) const { return acts_[size_t(node)]; }
  // Backpropagates from a gradient given for node `from`'s output (skipping layers after it).
  // Parameter gradients are overwritten (the gradient buffer holds this batch's gradient).
  void backward(const Tensor& dy_from, int from);
  Tensor& grad(int node) { return grads_[size_t(node)]; }
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
  void ensure_buffers(int64_t batch);
  void zero_param_grads(const GraphNode& n);

  std::vector<GraphNode> nodes_;
  Shape input_shape_;
  int output_ = -1;
  ParamStore store_;
  OpContext* ctx_ = nullptr;
  const Tensor* input_ = nullptr;
  int64_t batch_ = -1;
  std::vector<Tensor> acts_, grads_;
  Tensor scratch_;  // for a second contribution to an input's gradient
  std::vector<bool> grad_written_;
  std::unique_ptr<ElementwiseKernel> elementwise_;
  std::function<void(int64_t)> hook_;
  std::vector<int64_t> frontier_;  // per node: lowest trainable offset of this node and later ones
  bool profiling_ = false;
  std::vector<LayerTime> times_;
};

}  // namespace trainer
