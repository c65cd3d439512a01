// ExportContext: what a layer's ONNX exporter works with — its inputs as ONNX tensors, its weights
// from the checkpoint, batch norms folded into it, and helpers that add nodes and initializers.
#pragma once
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/export/weights.h"
#include "core/graph/graph.h"

namespace trainer::onnx_export {

// A tensor of the ONNX graph holding a trainer node's output. `shape` is the trainer's, without
// the batch: rank 3 is an image (H, W, C), held in ONNX as [N, C, H, W]; ranks 1 and 2 ([F],
// [T, F]) are held as the trainer holds them, [N, F] and [N, T, F].
struct Value {
  std::string name;
  Shape shape;
};

// The ONNX dimensions (without the batch) of a trainer shape, and the ONNX axis of its channels
// (the trainer's last axis).
std::vector<int64_t> onnx_dims(const Shape& s);
int64_t channel_axis(const Shape& s);

// A batch norm folded into the convolution or dense layer before it: y = x * scale + shift per
// output channel (scale = gamma / sqrt(moving_variance + epsilon), shift = beta - moving_mean * scale).
struct ChannelAffine {
  std::string batchnorm;  // the folded layer's name (for doc strings)
  std::vector<double> scale, shift;
};

class ExportContext;
// A batch-norm layer's inference as a per-channel affine map, from its moving statistics.
ChannelAffine batchnorm_affine(const ExportContext& ctx, size_t batchnorm);

class ExportContext {
 public:
  ExportContext(const Graph& g, const CheckpointWeights& w, int opset, onnx::GraphProto* graph);

  const Graph& graph() const { return g_; }
  const GraphNode& node(size_t i) const { return g_.nodes()[i]; }
  int opset() const { return opset_; }
  // relu6 as Clip(x, 0, 6) (true) or as Relu(x) - Relu(x - 6), which OpenCV 4.6 (Debian 12)
  // reads: its importer takes only the opset-6 Clip, with the bounds as attributes.
  bool relu6_clip() const { return relu6_clip_; }
  void set_relu6_clip(bool on) { relu6_clip_ = on; }

  // Inputs and outputs of nodes. set_model_input: the tensor that model input k is (after any
  // normalisation); set_output: node i's output (a layer that changes nothing aliases its input).
  void set_model_input(size_t k, Value v);
  const Value& input(size_t node, size_t i) const;
  const Value& output(size_t node) const;
  void set_output(size_t node, Value v);

  // Node i's parameter `param` ("kernel", "gamma", ...): its checkpoint name (the owner's when
  // the layer shares another's) and values, checked against the model's shape.
  const ParamEntry& param_entry(size_t node, const std::string& param) const;
  std::vector<float> param(size_t node, const std::string& param) const;
  bool has_param(size_t node, const std::string& param) const;

  // Batch-norm folding (planned before the layers are exported): the batch norm folded into
  // node i, and whether node i is a batch norm folded into its input.
  void fold(size_t producer, size_t batchnorm, ChannelAffine a);
  const ChannelAffine* folded_into(size_t node) const;
  bool is_folded(size_t batchnorm) const { return folded_bns_.count(batchnorm) > 0; }

  // Names: `base` when no tensor has it yet, else base#2, base#3, ... Layer outputs keep their
  // layer's name (reserved in the constructor).
  std::string fresh(const std::string& base);
  // Initializers, named after the trainer's parameter (`name`); `doc` says how the values were made
  // from the checkpoint's (transposed, folded, reordered). A shared layer's nodes each get their own
  // copy ("lstm_a/kernel#2"): OpenCV 4.6 reorders an LSTM's weights in place as it reads them, so
  // two LSTM nodes reading one initializer both compute with weights reordered twice.
  std::string add_initializer(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v,
                              const std::string& doc = "");
  std::string add_int64s(const std::string& name, const std::vector<int64_t>& v);  // a 1-D int64 constant
  std::string add_scalar(const std::string& name, float v);                          // a 0-D float constant
  // A node of the default domain; its name is the first output's.
  onnx::NodeProto* add_node(const std::string& op, const std::vector<std::string>& inputs,
                            const std::vector<std::string>& outputs);
  // The output name a layer's (last) node should use: the layer's own name.
  std::string output_name(size_t node) const { return reserved_.at(node); }

 private:
  const Graph& g_;
  const CheckpointWeights& w_;
  int opset_;
  bool relu6_clip_ = false;
  onnx::GraphProto* graph_;
  std::vector<std::optional<Value>> outputs_;
  std::vector<Value> model_inputs_;
  std::vector<std::string> reserved_;
  std::set<std::string> taken_;
  std::multimap<std::string, std::string> initializers_;  // trainer name -> tensor names
  std::map<size_t, ChannelAffine> folds_;
  std::set<size_t> folded_bns_;
};

// Attributes of a node.
void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v);
void attr_float(onnx::NodeProto* n, const std::string& name, float v);
void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v);
void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v);
void attr_strings(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v);

}  // namespace trainer::onnx_export
