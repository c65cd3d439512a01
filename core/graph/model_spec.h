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
  cfg::Node node;    // the layer's mapping, read with its block parameters in scope
  std::vector<std::string> inputs;  // producing layers' expanded names, or the model input's name
};

struct ModelSpec {
  Shape input;                       // H, W, C
  std::string input_name = "input";
  std::vector<LayerDef> layers;      // topologically sorted
  std::string output;                // the layer whose output is the model's output
};

// Reads and checks `model:`: `input: [H, W, C]`, `blocks:` (name -> {params, layers}),
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
// layer (the first takes the block's or the model's input).
ModelSpec parse_model(const cfg::Node& model);

}  // namespace trainer
