// CheckpointWeights: a model's parameters read by name from a checkpoint's safetensors file — the
// moving average ("ema/<parameter>") when asked for and present, else the trained weights.
#pragma once
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/graph/param_store.h"
#include "core/io/safetensors.h"

namespace trainer::onnx_export {

class CheckpointWeights {
 public:
  // Checks, as load_checkpoint does, that the checkpoint holds every parameter of `layout` with
  // its shape and no parameter the model lacks: otherwise a ConfigError naming the checkpoint.
  CheckpointWeights(const CheckpointInfo& c, const ParamLayout& layout, bool prefer_average);
  // True when the values are the moving average (train.ema).
  bool average() const { return average_; }
  std::vector<float> get(const ParamEntry& p) const;

 private:
  SafeTensorsReader st_;
  bool average_ = false;
};

}  // namespace trainer::onnx_export
