// Where an epoch's wall time went, as the epoch loop measures it on its thread: metrics.jsonl's
// time_*_s keys beside time_s.
#pragma once
#include <chrono>

#include "core/io/progress.h"

namespace trainer {

struct EpochTimes {
  double input = 0;       // waiting for the loader's next batch
  double step = 0;        // in the step (a GPU step read late: queueing its work, and waiting for a staging buffer)
  double wait = 0;        // waiting for steps' statistics still on their way from the device
  double log = 0;         // after each step: the progress bar, TensorBoard, the callbacks' batch end
  double checkpoint = 0;  // step checkpoints and the watchdog's snapshots
  double validation = 0;  // the validation pass (and the moving average's)
  double epoch_end = 0;   // callbacks, best weights and the console line, until the row is written
  // Inside `step`, the training steps' host calls (this trainee's thread; HostCallTimes): copies
  // into pinned staging and programs' launches; and the steps' waits after which the device had
  // nothing queued (0 where the host keeps ahead of a GPU; one a step where they take turns).
  double staging = 0, launch = 0;
  double host_waits = 0;

  // The parts as metrics.jsonl keys, and `other`: the rest of `total` (the epoch's time_s).
  Metrics as_metrics(double total) const {
    const double parts = input + step + wait + log + checkpoint + validation + epoch_end;
    return {{"time_s", total},           {"time_input_s", input},           {"time_step_s", step},
            {"time_wait_s", wait},       {"time_log_s", log},               {"time_checkpoint_s", checkpoint},
            {"time_validation_s", validation}, {"time_epoch_end_s", epoch_end}, {"time_other_s", total - parts},
            {"time_step_staging_s", staging},  {"time_step_launch_s", launch},  {"host_waits", host_waits}};
  }
};

// Adds the seconds from its making to its end to `into`.
class Stopwatch {
 public:
  explicit Stopwatch(double& into) : into_(into), t0_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() { into_ += seconds(); }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double& into_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace trainer
