// Evaluating a checkpoint on a data split (`trainer eval`): loss, accuracy and the confusion
// matrix, with the normalisation statistics the checkpoint was trained with.
#pragma once
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/run/spec.h"

namespace trainer {

struct EvalOptions {
  std::string split = "val";    // val | test | train
  std::string base_dir = ".";
  LoadWeights weights = LoadWeights::Average;  // the moving average when the checkpoint holds one (--no-ema: Trained)
};

struct EvalResult {
  std::string dataset;          // the split's description
  int64_t count = 0;
  double loss = 0, accuracy = 0;
  std::vector<std::string> class_names;
  std::vector<int64_t> confusion;  // classes x classes, row = true class, column = predicted; empty past
                                   // kMaxConfusionClasses (a language model's vocabulary)
  bool per_position = false;       // count, loss and accuracy are over positions (labels [N, T])
};
inline constexpr size_t kMaxConfusionClasses = 1000;

// The whole model as one data-parallel copy on the config's first device (eval, predict).
RunSpec one_copy(const RunSpec& e);

// Runs on the config's first device. ConfigError when the config has no such split.
EvalResult evaluate_checkpoint(const RunSpec& e, const CheckpointInfo& c, const EvalOptions& o);

}  // namespace trainer
