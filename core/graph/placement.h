// Placement: which device runs each layer of a device-parallel model (`placement:`), and the
// model cut into one stage per device, each a ModelSpec of its own whose extra inputs are the
// activations it receives from other devices.
#pragma once
#include <string>
#include <vector>

#include "core/graph/model_spec.h"

namespace trainer {

struct Placement {
  // Device labels as written ("gpu:0", "cpu:1", "cpu"), in order of first use by the layers.
  std::vector<std::string> devices;
  std::vector<int> layer_device;  // per spec.layers entry: an index into devices
};

// Reads `placement:` — a map from layer names or block instances ("incep1" places every layer
// of that block) to device labels: cpu, cpu:N (a virtual CPU device: its own thread and
// buffers, so device parallelism is testable without GPUs) or gpu:N. A more specific name wins
// over its block's. Layers not named run where their first input's layer runs (the first
// device named, for layers fed by the model's inputs). Unknown names are config errors.
Placement read_placement(const ModelSpec& spec, const cfg::Node& placement);

// One device's part of the model.
struct Stage {
  int device = 0;                 // index into Placement::devices
  ModelSpec spec;                 // its layers; inputs: the model inputs it reads, then one per
                                  // received activation (named after the producing layer)
  std::vector<int> model_inputs;  // per spec input: the model input's index, or -1 (received)
  std::vector<int> sends;         // its layers (indices into spec.layers) read by other stages
};

// Cuts the model at device boundaries. `shapes`: each spec.layers entry's output shape.
std::vector<Stage> make_stages(const ModelSpec& spec, const Placement& p, const std::vector<Shape>& shapes);

}  // namespace trainer
