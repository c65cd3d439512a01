// Bad-input corpus: device parallelism and sequence models (placement, share:, model inputs,
// pipeline, float-sample sets), exit 2 (4 for devices).
#pragma once
#include "corpus.h"

namespace bad_inputs {

// Two sequences through one shared LSTM on two virtual CPU devices, merged on a third.
const std::string kSeqBase = R"(name: bad
model:
  inputs:
    - {name: a, shape: [6, 4]}
    - {name: b, shape: [6, 4]}
  layers:
    - {name: lstm_a, type: lstm, units: 4, inputs: [a]}
    - {name: lstm_b, share: lstm_a, inputs: [b]}
    - {name: merged, type: concat, inputs: [lstm_a, lstm_b]}
    - {name: out, type: dense, units: 1}
    - {name: sig, type: sigmoid}
data:
  train: {type: synthetic_sequences, size: 16, length: 6, features: 4}
train: {epochs: 1, batch_size: 4, loss: binary_crossentropy}
optimizer: {type: rmsprop, lr: 0.01}
strategy: device_parallel
placement: {lstm_a: cpu:1, lstm_b: cpu:2, merged: cpu}
)";

inline std::vector<Case> device_parallel_cases() {
  auto seq = [](const std::vector<std::pair<std::string, std::string>>& edits) { return changed(edits, kSeqBase); };
  return {
      {.cat = "placement", .name = "unknown layer", .config = seq({{"merged: cpu}", "merge: cpu}"}}),
       .expect = "c.yaml:17:50: placement names 'merge', which is not a layer or block of the model (did you mean 'merged'?)"},
      {.cat = "placement", .name = "not a device", .config = seq({{"lstm_a: cpu:1", "lstm_a: tpu:1"}}),
       .expect = "c.yaml:17:21: 'tpu:1' is not a device: use cpu, cpu:N (a virtual CPU device) or gpu:N"},
      {.cat = "placement", .name = "not a mapping", .config = seq({{"placement: {lstm_a: cpu:1, lstm_b: cpu:2, merged: cpu}", "placement: [cpu, cpu:1]"}}),
       .expect = "c.yaml:17:12: 'placement' must map layer (or block) names to devices: {conv1: cpu:0, head: cpu:1}"},
      {.cat = "placement", .name = "placement without device_parallel", .config = seq({{"strategy: device_parallel", "strategy: data_parallel"}}),
       .expect = "c.yaml:17:12: 'placement' needs strategy: device_parallel or hybrid"},
      {.cat = "placement", .name = "device_parallel without placement",
       .config = seq({{"placement: {lstm_a: cpu:1, lstm_b: cpu:2, merged: cpu}\n", ""}}),
       .expect = "c.yaml:16:11: strategy device_parallel needs 'placement:' (layer or block name: device)"},
      {.cat = "placement", .name = "hybrid on one device", .config = seq({{"strategy: device_parallel", "strategy: hybrid"}}),
       .code = 4, .expect = "device error: strategy hybrid places 3 stages per copy: it needs a multiple of 3 devices, at least 6 "
                            "(--cpu 6 or --gpus with 6 GPUs for 2 copies), not 1"},
      {.cat = "placement", .name = "micro-batches 0", .config = seq({{"strategy: device_parallel", "strategy: device_parallel\npipeline: {microbatches: 0}"}}),
       .expect = "c.yaml:17:26: 'pipeline.microbatches' must be between 1 and 1024, not 0"},
      {.cat = "placement", .name = "gpu:N without a GPU", .config = seq({{"lstm_b: cpu:2", "lstm_b: gpu:0"}}), .args = "run c.yaml --gpus 0",
       .env = kNoGpu, .code = 4, .expect = "device error: GPUs were requested but none is visible: ..."},
      {.cat = "share", .name = "unknown layer", .config = seq({{"share: lstm_a", "share: lstm_x"}}),
       .expect = "c.yaml:8:29: layer 'lstm_b' shares 'lstm_x', which is not a layer of the model (did you mean 'lstm_a'?)"},
      {.cat = "share", .name = "its own configuration", .config = seq({{"share: lstm_a, inputs: [b]}", "share: lstm_a, inputs: [b], units: 8}"}}),
       .expect = "c.yaml:8:57: layer 'lstm_b' shares 'lstm_a' (its type, configuration and parameters): only name, inputs and "
                 "share may be given, not 'units'"},
      {.cat = "share", .name = "another type", .config = seq({{"share: lstm_a, inputs: [b]}", "share: lstm_a, type: dense, inputs: [b]}"}}),
       .expect = "c.yaml:8:7: layer 'lstm_b' is a dense but shares 'lstm_a', a lstm"},
      {.cat = "share", .name = "input of another shape", .config = seq({{"{name: b, shape: [6, 4]}", "{name: b, shape: [6, 5]}"}}),
       .expect = "c.yaml:8:7: layer 'lstm_b' shares 'lstm_a', but its input 6x5 would need kernel of shape 5x16, not 4x16"},
      {.cat = "inputs", .name = "input name twice", .config = seq({{"{name: b, shape: [6, 4]}", "{name: a, shape: [6, 4]}"}}),
       .expect = "c.yaml:5:7: input name 'a' is used twice"},
      {.cat = "inputs", .name = "input and inputs", .config = seq({{"  inputs:\n", "  input: [6, 4]\n  inputs:\n"}}),
       .expect = "c.yaml:5:5: the model needs either 'input: [...]' or 'inputs: [{name, shape}, ...]'"},
      {.cat = "inputs", .name = "a layer named like an input", .config = seq({{"{name: merged,", "{name: a,"}, {"merged: cpu}", "a: cpu}"}}),
       .expect = "c.yaml:9:14: layer name 'a' is the name of a model input"},
      {.cat = "sequences", .name = "augment on float samples", .config = seq({{"features: 4}", "features: 4}\n  augment: {flip: horizontal}"}}),
       .expect = "c.yaml:14:12: 'augment' applies to image sets; this set has float samples (sequences, arrays)"},
      {.cat = "sequences", .name = "sequences unlike the inputs", .config = seq({{"features: 4}", "features: 5}"}}),
       .expect = "c.yaml:13:10: this set gives 2 input(s) of shape 6x5, 6x5, but the model takes 2 input(s) of shape 6x4, 6x4"},
      {.cat = "sequences", .name = "images for a two-input model",
       .config = seq({{"{type: synthetic_sequences, size: 16, length: 6, features: 4}", "{type: synthetic, size: 16, image_size: 8, classes: 2}"}}),
       .expect = "c.yaml:13:10: this set gives 8x8x3 samples, but the model takes 2 inputs (48 values per sample)"},
  };
}

}  // namespace bad_inputs
