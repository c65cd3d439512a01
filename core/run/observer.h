// Observer: what a run shows and keeps — the run directory, console and train.log, metrics.csv,
// metrics.jsonl, curves.png and checkpoints — driven by the epoch loop's events, as Keras'
// CallbackList is by model.fit. Only the job's first process has one; the loop only trains.
#pragma once
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "core/checkpoint/checkpointer.h"
#include "core/io/progress.h"
#include "core/io/run_dir.h"
#include "core/run/fit.h"
#include "core/run/plan.h"

namespace trainer {

class Observer {
 public:
  // Creates the run directory (config.yaml, norm_stats.npy, train.log) and the metrics files (a
  // resumed run's earlier epochs first). `result` receives the run directory and what follows.
  Observer(const RunSpec& e, const FitOptions& o, const NormStats* stats, FitResult& result);
  ~Observer();
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  // A line outside the progress bar, also in train.log.
  void line(const std::string& s) { progress_.line(s); }
  void begin_epoch(int epoch, int epochs, int64_t steps) { progress_.begin_epoch(epoch + 1, epochs, steps); }
  // After `step` steps of the epoch, with the epoch's sums so far.
  void after_step(int64_t step, double loss, double accuracy);
  // The epoch's console line (train and val metrics), its metrics row and curves.
  void end_epoch(int epoch, const Metrics& console, const Metrics& row, double seconds);

  // Checkpoints (Checkpointer's policy): due at a global step or after an epoch, the best one.
  bool due_at_step(int64_t global_step) const { return ckpt_.due_at_step(global_step); }
  bool due_after_epoch(int epochs_done) const { return ckpt_.due_after_epoch(epochs_done); }
  std::string save(ModelState& m, const TrainState& s);
  std::string update_best(ModelState& m, const TrainState& s, const Metrics& row) { return ckpt_.update_best(m, s, row); }
  nlohmann::json checkpoint_state() const { return ckpt_.state(); }
  void restore_checkpoint_state(const nlohmann::json& j) { ckpt_.restore(j); }

  FitResult& result() { return result_; }

 private:
  class Record;  // metrics.csv, metrics.jsonl and curves.png
  FitResult& result_;
  std::string dir_;  // the run directory, made first
  std::FILE* log_ = nullptr;
  Progress progress_;
  std::unique_ptr<Record> record_;
  Checkpointer ckpt_;
};

}  // namespace trainer
