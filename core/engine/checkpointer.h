// Checkpointer: a run's checkpoint policy — which steps and epochs write one, how many are kept,
// and the best one by a metric (Keras ModelCheckpoint's save_best_only, with its messages).
#pragma once
#include <string>

#include "core/engine/checkpoint.h"
#include "core/engine/experiment.h"

namespace trainer {

class Checkpointer {
 public:
  // `dir`: the run's checkpoints/ folder (created here). `stats` may be null.
  Checkpointer(const CheckpointOptions& o, std::string dir, const NormStats* stats);
  const std::string& dir() const { return dir_; }

  bool due_after_epoch(int epochs_done) const { return o_.every > 0 && epochs_done % o_.every == 0; }
  bool due_at_step(int64_t global_step) const { return o_.every_steps > 0 && global_step % o_.every_steps == 0; }
  // Writes a checkpoint named for its position (epoch-0003 after epoch 3; epoch-0004-step-000017
  // 17 steps into epoch 4) and deletes periodic checkpoints beyond the newest `keep`.
  CheckpointInfo save(ModelState& r, const TrainState& s);
  // After an epoch's metrics (state `s` at the epoch's end): writes best.safetensors when the
  // `best` metric improved. Returns ModelCheckpoint's line ("" without `best`).
  std::string update_best(ModelState& r, const TrainState& s, const Metrics& row);

  // The best value so far, for the training state (resumed runs keep comparing against it).
  nlohmann::json state() const;
  void restore(const nlohmann::json& j);

 private:
  void prune();
  CheckpointOptions o_;
  std::string dir_;
  const NormStats* stats_;
  double best_;
};

}  // namespace trainer
