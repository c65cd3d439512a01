// Predicting with a checkpoint (`trainer predict`): inputs preprocessed as the checkpoint's training
// data was (its normalisation statistics), one model copy on the config's first device, class
// probabilities out.
#pragma once
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/run/spec.h"

namespace trainer {

struct PredictOptions {
  int64_t batch_size = 0;                      // 0: train.eval_batch_size, else train.batch_size
  LoadWeights weights = LoadWeights::Average;  // the moving average when the checkpoint holds one
};

struct Prediction {
  std::vector<std::string> names;    // one per predicted sample (PredictInputs::names)
  std::vector<std::string> failed;   // inputs that gave nothing: "<path>: <why>"
  std::vector<std::string> classes;  // the class names (the checkpoint's, else "0", "1", ...)
  std::vector<float> probs;          // names.size() x classes.size(), row-major
  bool averaged = false;             // the weights were the moving average (train.ema)
  std::string device;                // where it ran
};

// The output's probabilities: softmax of the logits (sigmoid for one unit: classes 0 and 1),
// whether the model ends in that activation or was trained from logits.
Prediction predict_checkpoint(const RunSpec& e, const CheckpointInfo& c, const std::vector<std::string>& inputs,
                              const PredictOptions& o);

}  // namespace trainer
