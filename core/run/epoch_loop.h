// The epoch loop every trainee's thread runs: steps, validation, callbacks; it tells rank 0's
// observer what happened (console, metrics, checkpoints) and otherwise only trains.
#pragma once
#include <atomic>
#include <mutex>
#include <optional>

#include "core/checkpoint/checkpoint.h"
#include "core/optim/schedule.h"
#include "core/run/data_setup.h"
#include "core/run/observer.h"
#include "core/run/plan.h"
#include "core/runtime/trainee.h"

namespace trainer {

// The watchdog's copy of the last completed step (rank 0 of process 0, on a CPU device): the model
// and where training stood, so a stall costs a step or a few rather than a checkpoint interval.
// Taken after a step when at least 50 times the fastest copy's duration has passed (at most 2% of
// the time: every step unless the model's copy is long against its step).
struct StepSnapshot {
  std::mutex mu;
  HostCopy state;
  TrainState train;
  int64_t taken_ns = 0, copy_ns = 0;
  bool valid = false;
  int64_t saved_step = -1;  // the global step of the newest checkpoint written
};

// What every trainee's loop shares, set up once by fit().
struct LoopSetup {
  const RunSpec& spec;
  const RunPlan& plan;
  DataSetup& data;
  const Schedule& schedule;
  const std::optional<CheckpointInfo>& resume;
  Observer* observer;  // the job's first process only (null in the others)
  std::atomic<int64_t> images{0};  // samples trained, counted by rank 0
  // How this process's replicas stopped (its first replica says): "", "interrupt", "early_stopping"
  // or "terminate_on_nan" — the same in every process, as every rank agrees on it — and where
  // ("at epoch 2 step 4/8", "at the end of epoch 3", "during the validation of epoch 3").
  std::string stopped_by, stopped_at;
  StepSnapshot* snapshot = nullptr;  // null: none kept
};

// The epochs of one trainee (every thread runs it; rank 0 reports to the observer).
void train_epochs(Trainee& w, LoopSetup& run);

}  // namespace trainer
