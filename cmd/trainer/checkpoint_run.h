// A checkpoint named on the command line and the config its model is built from (eval, predict, export, generate).
#pragma once
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/run/spec.h"

namespace trainer::cli {

struct CheckpointRun {
  CheckpointInfo checkpoint;
  RunSpec spec;
};

// `target`: a run directory (its newest valid checkpoint; each one passed over is a warning line on
// stderr) or a checkpoint file. The model's config is `config`, or else the run directory's
// config.yaml (not the sidecar's neighbour: a live run may have pruned the sidecar), with `sets`
// applied.
CheckpointRun open_checkpoint_run(const std::string& target, const std::string& config,
                                  const std::vector<std::string>& sets);

}  // namespace trainer::cli
