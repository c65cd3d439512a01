// Checkpointer: a run's checkpoint policy — which steps and epochs write one, how many are kept,
// and the best one by a metric (Keras ModelCheckpoint's save_best_only, with its messages).
#pragma once
#include <string>

#include "core/checkpoint/checkpoint.h"

namespace trainer {

// `checkpoint:` — when checkpoints are written (the run directory's checkpoints/) and how many kept.
struct CheckpointSpec {
  int every = 1;               // epochs between checkpoints (0: none at epoch ends)
  int64_t every_steps = 0;     // also every N global steps (0: off)
  int keep = 2;                // the newest K periodic checkpoints are kept
  std::string best;            // a metric ("val_accuracy"): also keep best.safetensors
  bool best_max = false;       // whether larger is better for `best` (mode auto|min|max)
  cfg::Node best_node;         // `best:`, for messages
};
CheckpointSpec read_checkpoint_spec(const cfg::Node& section);
// Keras' mode 'auto': metrics with "acc" in the name are maximised, everything else minimised.
bool maximised(const std::string& metric, const std::string& mode);

class Checkpointer {
 public:
  // `dir`: the run's checkpoints/ folder (created here). `stats` may be null; `classes`: the
  // training set's class names, recorded in every sidecar.
  Checkpointer(const CheckpointSpec& o, std::string dir, const NormStats* stats, std::vector<std::string> classes);
  const std::string& dir() const { return dir_; }

  bool due_after_epoch(int epochs_done) const { return o_.every > 0 && epochs_done % o_.every == 0; }
  bool due_at_step(int64_t global_step) const { return o_.every_steps > 0 && global_step % o_.every_steps == 0; }
  // Writes a checkpoint named for its position (epoch-0003 after epoch 3; epoch-0004-step-000017
  // 17 steps into epoch 4) and deletes periodic checkpoints beyond the newest `keep`. `best`:
  // restore_best_weights's copy of the best epoch's weights, kept in it too (or null).
  CheckpointInfo save(ModelState& r, const TrainState& s, const std::vector<float>* best = nullptr);
  // After an epoch's metrics (state `s` at the epoch's end): writes best.safetensors when the
  // `best` metric improved. Returns ModelCheckpoint's line ("" without `best`).
  std::string update_best(ModelState& r, const TrainState& s, const Metrics& row);

  // The best value so far, for the training state (resumed runs keep comparing against it).
  nlohmann::json state() const;
  void restore(const nlohmann::json& j);

 private:
  void prune();
  CheckpointSpec o_;
  std::string dir_;
  const NormStats* stats_;
  std::vector<std::string> classes_;
  double best_;
};

}  // namespace trainer
