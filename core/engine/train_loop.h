// The epoch loop one replica's thread runs: steps, validation, callbacks, and (on rank 0) the
// console, the metrics files and checkpoints. fit() sets up what the ranks share.
#pragma once
#include <atomic>
#include <optional>
#include <string>

#include "core/engine/checkpointer.h"
#include "core/engine/data_setup.h"
#include "core/engine/fit.h"
#include "core/engine/trainee.h"
#include "core/io/run_dir.h"
#include "core/optim/schedule.h"

namespace trainer {

// metrics.csv, metrics.jsonl and curves.png, kept in step (rank 0 only).
class RunRecord {
 public:
  RunRecord(const std::string& run_dir, const std::string& model_name, const MetricRows& earlier);
  // Appends an epoch's row; redraws curves.png (a plot failure is one warning line, once).
  void add(int epoch, const Metrics& row, double seconds, Progress& progress);

 private:
  std::string dir_, name_;
  MetricRows rows_;
  CsvLogger csv_;
  JsonlLogger jsonl_;
  bool plot_warned_ = false;
};

struct RunShared {
  const Experiment& e;
  const FitOptions& o;
  DataSetup& data;
  const Schedule& schedule;
  double base_lr = 0;    // after linear scaling
  double lr_factor = 1;
  int64_t steps = 0;     // per epoch
  Progress& progress;    // rank 0
  RunRecord* record;     // rank 0 (null in the other processes of a multi-process job)
  Checkpointer* ckpt;    // rank 0 (null in the other processes)
  FitResult& result;     // rank 0
  std::atomic<int64_t> images{0};
};

// The epochs of one rank. Every rank's thread runs it; rank 0 writes the files.
void train_rank(Trainee& w, RunShared& run);

}  // namespace trainer
