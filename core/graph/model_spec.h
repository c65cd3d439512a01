// ModelSpec: the `model:` section flattened — blocks expanded, inputs resolved, layers in
// topological order — ready to be instantiated as a Graph on any number of replicas.
#pragma once
#include <string>
#include <vector>

#include "core/io/config.h"
#include "core/tensor/shape.h"

namespace trainer {

struct LayerDef {
  std::string name;  // expanded: "incep1/conv_3x3/conv"
  std::string type;  // a registered layer type
  cfg::Node node;    // the layer's mapping, read with its block parameters in scope (messages)
  cfg::Node config;  // where its own keys are read: `node`, or the shared layer's mapping
  std::vector<std::string> inputs;  // producing layers' expanded names, or model input names
  // `share: other`: the layer whose parameters (and configuration) this one uses; their
  // parameters are named after it ("lstm_a/kernel"). Empty: the layer has its own.
  std::string params_of;
  // Set: this is the activation layer made of layer X's `activation:` key ("X/activation"); its
  // `config` is X's mapping, whose keys X's reader checks.
  std::string activation_of;
};

struct ModelInput {
  std::string name;  // "input" for `input: [...]`
  Shape shape;       // without batch
  cfg::Node node;
};

struct ModelSpec {
  std::vector<ModelInput> inputs;    // one or more, in the order a sample's values come
  Shape input;                       // one sample as the data loader gives it: the single input's
                                     // shape, or Shape{total elements} with several inputs
  std::vector<LayerDef> layers;      // topologically sorted
  std::string output;                // the layer whose output is the model's output
  int input_index(const std::string& name) const;  // -1 when `name` is not a model input
};

// Reads and checks `model:`: `input: [H, W, C]` (or [steps, features], [features]) or several
// `inputs: [{name: a, shape: [140, 256]}, ...]`, `blocks:` (name -> {params, layers}),
// `layers:` (a list; each item a layer or a block instance), optional `output:`.
//
//   blocks:
//     conv_module:
//       params: {filters: null, kernel: 3, stride: 1, padding: same}   # null: required
//       layers:
//         - {name: conv, type: conv2d, filters: $filters, kernel: $kernel, strides: $stride, padding: $padding}
//         - {name: bn, type: batchnorm}
//         - {name: act, type: relu}
//   layers:
//     - {name: conv1, type: conv_module, filters: 96}
//
// Inside a block, `inputs:` names sibling layers or `$input` (the block instance's inputs); the
// instance's name stands for the block's last layer. Layers without `inputs:` take the previous
// layer (the first takes the block's or the model's input). `{name: b, share: a, inputs: [x]}`
// is a second use of layer `a`: the same type, configuration and parameters (the Keras shared
// layer); its gradient adds to a's.
//
// `activation: relu` on a dense, conv2d or depthwise_conv2d (Keras's Dense(units, activation=...))
// is an activation layer "<name>/activation" after it (`softmax` a softmax layer, `linear` none);
// every reference to the layer, `output:` included, takes the activated output, as Keras's layer
// output is. A second use (`share:`) applies it too.
ModelSpec parse_model(const cfg::Node& model);

// Why a layer or input name cannot be used ("'/' separates scopes"), or "" (`top_level`: a name
// outside any block, which must not be a checkpoint's own prefix either).
std::string name_problem(const std::string& name, bool top_level);

}  // namespace trainer
