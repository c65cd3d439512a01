// Observer: what a run shows and keeps — the run directory, console and train.log, metrics.csv,
// metrics.jsonl, curves.png, TensorBoard events (tb/) and checkpoints — driven by the epoch
// loop's events, as Keras' CallbackList is by model.fit. Only the job's first process has one;
// the loop only trains.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "core/checkpoint/checkpointer.h"
#include "core/io/progress.h"
#include "core/io/run_dir.h"
#include "core/io/tensorboard.h"
#include "core/run/fit.h"
#include "core/run/plan.h"

namespace trainer {

// An optimizer step's values for TensorBoard (the epoch loop's, at the step's last micro-batch).
struct StepReport {
  int64_t global_step = 0;  // micro-batches done in the run (as checkpoints count), this one included
  double loss = 0;          // the step's mean loss over its samples (every replica and micro-batch)
  double lr = 0;            // the learning rate the step used
  int64_t samples = 0;      // the step's samples over every replica and micro-batch
  double grad_norm = NAN;   // clipping on: the gradient norm before clipping (NaN: off or a skipped step)
  double loss_scale = NAN;  // loss scaling on: the scale after the step (NaN: off)
};

class Observer {
 public:
  // Creates the run directory (config.yaml, norm_stats.npy, train.log) and the metrics files (a
  // resumed run's earlier epochs first). `result` receives the run directory and what follows.
  // `classes`: the training set's class names (recorded in checkpoints for predict).
  Observer(const RunSpec& e, const FitOptions& o, const NormStats* stats, std::vector<std::string> classes,
           FitResult& result);
  ~Observer();
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  // A line outside the progress bar, also in train.log.
  void line(const std::string& s) { progress_.line(s); }
  void begin_epoch(int epoch, int epochs, int64_t steps);
  // After `step` steps of the epoch, with the epoch's sums so far; `update` when an optimizer step
  // ended with it (TensorBoard's step/* scalars; samples/s from the time since the previous one).
  void after_step(int64_t step, double loss, double accuracy, const StepReport* update = nullptr);
  // The epoch's console line (train and val metrics), its metrics row and curves; `times`
  // (time_s and its parts: EpochTimes) go to metrics.jsonl only.
  void end_epoch(int epoch, const Metrics& console, const Metrics& row, const Metrics& times);

  // Checkpoints (Checkpointer's policy): due at a global step or after an epoch, the best one.
  bool due_at_step(int64_t global_step) const { return ckpt_.due_at_step(global_step); }
  bool due_after_epoch(int epochs_done) const { return ckpt_.due_after_epoch(epochs_done); }
  std::string save(ModelState& m, const TrainState& s, const std::vector<float>* best = nullptr);
  std::string update_best(ModelState& m, const TrainState& s, const Metrics& row) { return ckpt_.update_best(m, s, row); }
  nlohmann::json checkpoint_state() const { return ckpt_.state(); }
  void restore_checkpoint_state(const nlohmann::json& j) { ckpt_.restore(j); }

  FitResult& result() { return result_; }

 private:
  class Record;  // metrics.csv, metrics.jsonl and curves.png
  void open_tensorboard(const RunSpec& e, const FitOptions& o, const MetricRows& earlier);
  FitResult& result_;
  std::string dir_;  // the run directory, made first
  std::FILE* log_ = nullptr;
  Progress progress_;
  std::unique_ptr<Record> record_;
  std::unique_ptr<EventWriter> tb_;  // RUN_DIR/tb (logging.tensorboard)
  std::chrono::steady_clock::time_point last_update_;  // the previous optimizer step's end (samples/s)
  Checkpointer ckpt_;
};

}  // namespace trainer
