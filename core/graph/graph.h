// Graph: a ModelSpec instantiated once — layers in topological order (parsed, shapes inferred),
// the inputs, the output, the parameter layout — immutable, shared by every replica and stage,
// each of which runs it through an Executor of its own.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/graph/layer.h"
#include "core/graph/model_spec.h"
#include "core/graph/param_store.h"

namespace trainer {

struct GraphNode {
  std::unique_ptr<Layer> layer;  // the prototype: configuration and inferred shapes (executors clone it)
  std::vector<int> inputs;       // node indices; -1 - k is model input k
  Shape shape;                   // output shape without batch
  std::vector<size_t> params;    // indices into the ParamLayout
  int shares = -1;               // the node whose parameters this one uses (`share:`), else -1
  std::vector<int> sharers;      // the nodes that use this node's parameters
  std::vector<bool> tied;        // per entry of `params`: another node's parameter (ParamSpec::tied_to)
  std::vector<int> tie_users;    // the later nodes that use one of this node's parameters (tied_to)
  int consumers = 0;
};

// Model input k is node index -1 - k in GraphNode::inputs.
inline bool is_model_input(int j) { return j < 0; }
inline int model_input_index(int j) { return -1 - j; }

class Graph {
 public:
  // Instantiates every layer, checks input counts and infers shapes (config errors are thrown
  // with the offending layer's location) and lays out the parameters. No device memory.
  // `fold_padding` (the pad_fold fast path): a layer that only pads (zero_pad2d), read by one
  // layer that can take its zeros into its windows (a 'valid' depthwise_conv2d) and by nothing
  // else, becomes an identity of its input's shape, and its reader adds the zeros itself: no
  // padded copy of the activations, forward or backward.
  // The runs' graphs fold where the pad_fold fast path is on (TraineeSpec::make_graph); the
  // exporter's, the pipeline stages' and shape-only ones do not.
  explicit Graph(const ModelSpec& spec, bool fold_padding = false);

  const std::vector<GraphNode>& nodes() const { return nodes_; }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  int output_node() const { return output_; }
  const Shape& output_shape() const { return nodes_[size_t(output_)].shape; }
  int node_index(const std::string& name) const;  // -1 when absent
  const ParamLayout& params() const { return params_; }
  int64_t flops_per_sample() const;  // forward
  // The lowest trainable parameter offset of node i and every later node (i = nodes().size():
  // the end of the trainable floats): backward has finished every gradient at or above it once
  // node i's backward is done. A sharer's parameters count at their owner.
  int64_t frontier(size_t i) const { return frontier_[i]; }

 private:
  void fold_pad(GraphNode& pad, GraphNode& reader, Shape& reader_input);
  std::vector<GraphNode> nodes_;
  std::vector<Shape> input_shapes_;
  std::vector<std::string> input_names_;
  int output_ = -1;
  ParamLayout params_;
  std::vector<int64_t> frontier_;
};

}  // namespace trainer
