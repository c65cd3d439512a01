// Bad-input corpus: `trainer export` — opsets it does not write, a checkpoint of another model,
// statistics the checkpoint lacks, a layer the export cannot express, missing or unwritable targets.
#pragma once
#include "checkpoint_cases.h"
#include "corpus.h"

namespace bad_inputs {

// A model whose embedding takes 2-D token ids: its 3-D output would be read as an image.
const std::string kEmbedding2d = R"(name: bad
model:
  input: [2, 3]
  layers:
    - {name: embed, type: embedding, input_dim: 10, output_dim: 4}
    - {name: flatten, type: flatten}
    - {name: dense, type: dense, units: 3}
    - {name: softmax, type: softmax}
data:
  train: {type: npy, x: ids.npy, labels: y.npy, classes: 3}
train: {epochs: 1, batch_size: 4}
optimizer: {type: sgd, lr: 0.01}
schedule: {type: constant}
devices: {cpu: 1}
)";

// kEmbedding2d trained for an epoch (token ids and labels all 0): its run directory's files.
inline const std::vector<File>& embedding_run() {
  static const std::vector<File> files = [] {
    const std::string dir = e2e::temp_dir("exportsrc");
    e2e::write_file(dir + "/c.yaml", kEmbedding2d);
    e2e::write_file(dir + "/ids.npy", npy_declaring("(8, 2, 3)", 48, "|u1"));
    e2e::write_file(dir + "/y.npy", npy_declaring("(8,)", 64, "<i8"));
    e2e::Result r = e2e::trainer("run c.yaml --run-dir r", dir, "timeout 120");
    if (r.code != 0) throw std::logic_error("corpus: the embedding run failed: " + r.err);
    return std::vector<File>{{"r/config.yaml", e2e::read_file(dir + "/r/config.yaml")},
                             {"r/checkpoints/epoch-0001.safetensors", e2e::read_file(dir + "/r/checkpoints/epoch-0001.safetensors")},
                             {"r/checkpoints/epoch-0001.json", e2e::read_file(dir + "/r/checkpoints/epoch-0001.json")}};
  }();
  return files;
}

inline std::vector<Case> export_cases() {
  const GoodRun& g = good_run();
  const std::vector<File> run = run_dir(g.weights, g.sidecar);
  const std::string st = "r/checkpoints/epoch-0001.safetensors";
  return {
      {.cat = "export", .name = "an opset it does not write", .files = run, .args = "export r --onnx m.onnx --opset 12",
       .expect = "--opset: opset 12 is not written; choose 13 to 17 (default 17)"},
      {.cat = "export", .name = "an opset newer than ONNX 1.12 knows", .files = run, .args = "export r --onnx m.onnx --opset 18",
       .expect = "--opset: opset 18 is not written; choose 13 to 17 (default 17)"},
      {.cat = "export", .name = "no --onnx file", .files = run, .args = "export r",
       .expect = "--onnx is required (see trainer export --help)"},
      {.cat = "export", .name = "an unknown relu6 form", .files = run, .args = "export r --onnx m.onnx --relu6 min",
       .expect = "--relu6: min not in {relus,clip} (see trainer export --help)"},
      {.cat = "export", .name = "a checkpoint of another model", .config = changed({{"units: 3", "units: 5"}}), .files = run,
       .args = "export r --onnx m.onnx --config c.yaml",
       .expect = st + ": 'dense/kernel' has shape 4x3, the model's is 4x5 (does the config match the checkpoint?)"},
      {.cat = "export", .name = "normalisation statistics the checkpoint lacks",
       .config = changed({{"augment: {flip: horizontal}", "augment: {flip: horizontal, mean: per_channel}"}}), .files = run,
       .args = "export r --onnx m.onnx --config c.yaml --normalize",
       .expect = st + ": the config normalises by the per_channel mean, but the checkpoint holds no such statistics "
                      "(normalization 'none')"},
      {.cat = "export", .name = "an embedding over 2-D token ids", .files = embedding_run(), .args = "export r --onnx m.onnx",
       .expect = "r/config.yaml:5:7: embedding layer 'embed' over 2x3 token ids cannot be exported: ...image..."},
      {.cat = "export", .name = "no such run", .args = "export nowhere --onnx m.onnx", .code = 3,
       .expect = "file error: nowhere: no such run directory or checkpoint"},
      {.cat = "export", .name = "the model file in a missing folder", .files = run, .args = "export r --onnx no/such/m.onnx",
       .code = 3, .expect = "file error: cannot create no/such/m.onnx: No such file or directory"},
      {.cat = "export", .name = "the model file is a folder", .files = run, .args = "export r --onnx r", .code = 3,
       .expect = "file error: cannot write r: Is a directory"},
  };
}

}  // namespace bad_inputs
