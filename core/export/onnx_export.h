// ONNX export: a trained model (its config's graph and a checkpoint's weights) as an ONNX model
// built with ONNX's own protobuf classes (libonnx-dev) — NCHW image input with a dynamic batch,
// batch norms folded or kept, the input normalisation optionally inside the model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/data/transforms.h"
#include "core/graph/model_spec.h"

namespace trainer {

// The opsets written: 13 (Softmax over one axis, Clip's bounds as inputs, Pad's as an input) to 17,
// the newest that Debian's ONNX 1.12 knows. Every operator used keeps the same meaning over the range.
constexpr int kOnnxMinOpset = 13, kOnnxMaxOpset = 17, kOnnxDefaultOpset = 17;
// The ONNX IR version that goes with an opset (ONNX's versioning table: opset 13-14 came with IR 7,
// 15-17 with IR 8).
int64_t onnx_ir_version(int opset);

struct OnnxExportOptions {
  int opset = kOnnxDefaultOpset;
  bool normalize = false;       // the training normalisation inside the model: it takes pixels 0..255
  bool keep_batchnorm = false;  // BatchNormalization nodes instead of folding into conv/dense
  bool prefer_average = true;   // the moving average (train.ema) when the checkpoint holds one
  // relu6 as one Clip(x, 0, 6) node (what ONNX Runtime, TensorRT and OpenCV >= 4.7 fuse into the
  // convolution) or, by default, as Relu(x) - Relu(x - 6), which every runtime reads, OpenCV 4.6
  // (Debian 12's python3-opencv) included: its importer takes only the opset-6 Clip.
  bool relu6_clip = false;
  std::string model_name;       // the graph's name (the run's `name:`)
};

struct OnnxExportReport {
  int opset = 0;
  int64_t ir_version = 0;
  uint64_t bytes = 0;
  size_t nodes = 0, initializers = 0, folded_batchnorms = 0;
  bool average = false;                // the weights are the moving average
  std::vector<std::string> inputs;     // "input [N, 3, 32, 32] float32"
  std::string output;                  // "softmax [N, 10] float32"
  std::string expects;                 // what the input must hold (also the model's doc_string)
};

// Builds the model from `model` (the run's config) and checkpoint `c`, and writes it to `path`
// atomically. ConfigError (exit 2): an opset out of range, a layer without an ONNX export (at its
// config line), a checkpoint of another model, --normalize over statistics the checkpoint lacks;
// FileError (exit 3): the checkpoint or `path` cannot be read or written.
OnnxExportReport export_onnx(const ModelSpec& model, const Augment& augment, const CheckpointInfo& c,
                             const OnnxExportOptions& o, const std::string& path);

}  // namespace trainer
