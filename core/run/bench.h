// bench(): training throughput of a config's model (warm-up steps, then timed ones) and where a
// step's time goes, through the run's strategy (core/runtime/bench_result.h): what `trainer bench` prints.
#pragma once
#include <string>
#include <vector>

#include "core/run/plan.h"
#include "core/run/spec.h"
#include "core/runtime/bench_result.h"

namespace trainer {

// Plans the run as `trainer run` would, builds its strategy and times it on synthetic batches or
// (o.data) the training data. `plan`, when given, receives the plan (for the report).
BenchResult bench(const RunSpec& e, const BenchOptions& o, RunPlan* plan = nullptr);

}  // namespace trainer
