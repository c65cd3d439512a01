// fit(): the training run on one device — data, replica, epochs, validation, console and
// the run directory's files.
#pragma once
#include <cstdio>
#include <string>

#include "core/engine/experiment.h"
#include "core/io/progress.h"

namespace trainer {

struct FitOptions {
  std::string runs_root = "runs";
  std::string run_dir;     // explicit run directory (must be new or empty)
  std::string base_dir = ".";  // relative data paths resolve against this
  bool terminal = false;   // progress bar (true) or one line per epoch
  std::FILE* out = stdout;
};

struct FitResult {
  std::string run_dir;
  int epochs_done = 0;
  bool interrupted = false;
  Metrics last;  // the last epoch's metrics (accuracy, loss, lr, val_accuracy, val_loss)
  double images_per_second = 0;
};

FitResult fit(const Experiment& e, const FitOptions& o);

}  // namespace trainer
