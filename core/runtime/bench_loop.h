// The one bench loop of every strategy: timed optimizer steps on each trainee's thread (warm-up,
// a barrier, the timed steps, the parts, the per-layer pass), whose numbers the strategy then
// describes (Strategy::bench, Strategy::describe).
#pragma once
#include <functional>

#include "core/runtime/bench_result.h"
#include "core/runtime/trainee.h"

namespace trainer {

// The bench's steps whose statistics are unread are read as the epoch loop reads them, a few steps
// late (a GPU's recorded step waits for nothing of the one before): bench_read reads those due
// (every one with `all`).
void bench_read(StepReads& pending, bool all);

// One optimizer step of `t`: `k` micro-batches (train.accumulate) from `in` through t.step, each
// one's statistics into `pending` and those due read, `after` (when given) after each. Returns the
// step's samples over every rank; adds the input's wait to `waited`.
int64_t bench_step(Trainee& t, BenchInput& in, int k, float lr, uint64_t seed, bool& stop, double& waited,
                   StepReads& pending, const std::function<void()>& after = {});

}  // namespace trainer
