// The training loop's test hooks, read once from the environment: a fault, a stop signal, a
// stalled rank or an inf gradient at a chosen global step, statistics read late (the e2e and
// fault tests' levers).
#pragma once
#include <cstdint>
#include <set>

#include "core/runtime/trainee.h"

namespace trainer {

struct LoopTestHooks {
  int fault_rank = -1;            // TRAINER_INJECT_FAULT=<rank>:<step>: that replica throws there
  int64_t fault_step = -1;
  int64_t sigint_step = -1;       // TRAINER_TEST_SIGINT_AT_STEP=<step>: rank 0 raises SIGINT (the real handler)
  int hold_rank = -1;             // TRAINER_TEST_HOLD=<rank>:<step>: that rank's thread stops there for good
  int64_t hold_step = -1;         //   (the watchdog's test: a replica that makes no progress)
  std::set<int64_t> nonfinite;    // TRAINER_INJECT_NONFINITE=<step>[,<step>...]: an inf in one gradient
                                  //   (Trainee::inject_nonfinite), for loss scaling's skipped steps
  int stats_lag = -1;             // TRAINER_TEST_STATS_LAG=<k>: the loop reads each step's statistics k
                                  //   steps late, landed or not (PendingSteps' hold: a GPU's lag, anywhere)

  static LoopTestHooks from_env();
  // Before global step `step` (a micro-batch) on `rank`: holds, throws, raises or poisons as asked.
  void before_step(int rank, int64_t step, Trainee& t) const;
};

}  // namespace trainer
