// fit(): a training run — data, replicas, epochs, validation, callbacks, checkpoints, console
// and the run directory's files — started fresh or resumed from a checkpoint.
#pragma once
#include <cstdio>
#include <optional>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/run/spec.h"
#include "core/io/progress.h"

namespace trainer {

struct FitOptions {
  std::string runs_root = "runs";
  std::string run_dir;     // explicit run directory (must be new or empty)
  std::string base_dir = ".";  // relative data paths resolve against this
  bool terminal = false;   // progress bar (true) or one line per epoch
  std::FILE* out = stdout;
  // Continue from this checkpoint: weights, optimizer, position, callbacks. On another number of
  // replicas the global batch is kept (the per-replica batch changes), so the data order and the
  // schedule continue as they were.
  std::optional<CheckpointInfo> resume;
  std::string resume_note;  // printed at start (how the checkpoint was found)
};

struct FitResult {
  std::string run_dir;
  int epochs_done = 0;
  bool interrupted = false;
  std::string stopped_by;   // "", "interrupt", "early_stopping" or "terminate_on_nan"
  std::string checkpoint;   // the last checkpoint written ("" when none)
  Metrics last;  // the last epoch's metrics (accuracy, loss, lr, val_accuracy, val_loss)
  double images_per_second = 0;
};

FitResult fit(const RunSpec& e, const FitOptions& o);

}  // namespace trainer
