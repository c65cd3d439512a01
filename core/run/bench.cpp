// Timed training steps: the plan, the inputs (synthetic or the training data), the strategy's bench.
#include "core/run/bench.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/run/ceiling.h"
#include "core/run/data_setup.h"
#include "core/runtime/strategy.h"

namespace trainer {

BenchResult bench(const RunSpec& e, const BenchOptions& o, RunPlan* plan_out) {
  RunPlan plan = plan_run(e);
  DataSetup data;  // opened first: missing data fails before the replicas are built
  std::vector<BenchInput> inputs;
  if (o.data) {
    data = setup_data(e, DataShards{plan.replicas, plan.first_rank, plan.local_replicas, plan.batch, plan.eval_batch},
                      o.base_dir);
    if (data.train_loaders[0]->batches_per_epoch() == 0)
      throw DataError(fmt::format("the training set has {} samples, fewer than one global batch of {} (drop_last is on)",
                                  data.train->size(), plan.global_batch));
    for (auto& l : data.train_loaders) inputs.emplace_back(*l, e.train.steps_per_epoch);
  } else {
    // Synthetic labels draw from the loss head's outputs (two for one output unit, a binary classifier).
    // Per-position logits take a label per position; an input read by an embedding takes token
    // ids below its input_dim (noise would be refused as ids).
    const int classes = int(std::max<int64_t>(2, plan.logits_units));
    const Shape labels = plan.logits_positions > 0 ? Shape{plan.logits_positions} : Shape{};
    int64_t ids = 0;
    for (const GraphNode& n : plan.trainee.graph->nodes())
      if (n.layer->type() == "embedding" && is_model_input(n.inputs[0])) {
        const int64_t dim = n.layer->params()[0].shape[0];
        ids = ids ? std::min(ids, dim) : dim;
      }
    for (int r = 0; r < plan.local_replicas; ++r)
      inputs.emplace_back(e.model.input, plan.batch, classes, e.seed, plan.first_rank + r, plan.replicas, labels, ids);
  }
  // The CPU's ceiling for one replica's threads (cached per machine; measured, about a second,
  // before the replicas exist, so that nothing else runs meanwhile).
  BenchOptions opts = o;
  std::optional<Ceiling> ceiling;
  const bool cpu = std::all_of(plan.devices.begin(), plan.devices.end(), [](const Device& d) { return d.is_cpu(); });
  if (cpu) ceiling = cpu_ceiling(plan.threads, e.precision);
  if (ceiling) opts.ceiling_gflops = ceiling->conv_gflops;
  opts.lr = float(plan.base_lr);
  opts.accumulate = e.train.accumulate;
  std::unique_ptr<Strategy> strategy = strategy_type(plan.strategy).make(plan.trainee, plan.devices, plan.threads);
  BenchResult r = strategy->bench(inputs, opts);
  // Replicas, or pipeline stages, of `threads` each, in every process of the job: the step's
  // FLOP/s count the global batch (mpirun -np 2 with one replica each had compared the job's
  // 200 GFLOP/s with one replica's ceiling, and measured the ceiling again every run).
  const int copies = int(plan.devices.size()) * plan.processes;
  if (ceiling && ceiling->cached && r.gflops_per_second > 1.02 * copies * ceiling->conv_gflops) {
    // The step beat the cached ceiling by more than timing noise: that value was measured while
    // something else took the cores (seen: 100.3 GFLOP/s cached for one thread, 113.5 measured
    // again on a quiet machine). Measure again now that the replicas are idle, and keep it.
    if (std::optional<Ceiling> again = cpu_ceiling(plan.threads, e.precision, true)) {
      fmt::print(stderr,
                 "note: this run reached {:.1f} GFLOP/s, over the cached ceiling of {:.1f}: measured it again: {:.1f}\n",
                 r.gflops_per_second, copies * ceiling->conv_gflops, copies * again->conv_gflops);
      ceiling = again;
    }
  }
  if (ceiling) {
    r.ceiling_gflops = copies * ceiling->conv_gflops;
    r.gemm_ceiling_gflops = copies * ceiling->gemm_gflops;
    r.ceiling_cached = ceiling->cached;
  }
  if (plan_out) *plan_out = plan;
  return r;
}

}  // namespace trainer
