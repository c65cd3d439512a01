// `trainer bench` for a device-parallel model: timed GPipe steps on a fixed random batch or the
// config's training data, the stages' idle (bubble) fraction, and where a step's time goes
// (the schedule, the shared-gradient sum, the updates, input wait; per stage busy and waiting).
#include <fmt/format.h>

#include <chrono>

#include "core/engine/bench.h"
#include "core/engine/devices.h"
#include "core/engine/pipeline/pipeline_worker.h"

namespace trainer {

BenchResult bench_pipeline(const Experiment& e, const BenchOptions& o) {
  using Clock = std::chrono::steady_clock;
  std::vector<Device> devices = placement_devices(e.placement, e.devices, nullptr);
  int cpu_devices = 0;
  for (const Device& d : devices) cpu_devices += d.is_cpu();
  const int threads = threads_per_replica(e.devices, std::max(1, cpu_devices));
  DataSetup data;  // opened first: missing data fails before the stages are built
  if (o.data) data = bench_data(e, o, 1, 0, 1);
  PipelineWorker w(e, devices, threads);
  const int64_t b = e.train.batch_size;
  const float lr = float(make_optimizer(e.optimizer)->base_lr());

  BenchInput in(e, 0, 1, o.data ? data.train_loaders[0].get() : nullptr);
  bool stop = false;
  double warm_wait = 0;
  for (int s = 0; s < o.warmup; ++s) w.train_step(in.next(warm_wait), lr, uint64_t(s), stop);
  w.reset_bubble();
  w.set_timing(true);
  PipelineWorker::StepTimes sum;
  sum.stages.resize(size_t(w.stages()));
  double waited = 0;
  int64_t images = 0;
  const auto t0 = Clock::now();
  for (int s = 0; s < o.steps; ++s) {
    const Batch& batch = in.next(waited);
    images += batch.global_size;
    w.train_step(batch, lr, uint64_t(o.warmup + s), stop);
    const PipelineWorker::StepTimes& t = w.step_times();
    sum.schedule += t.schedule;
    sum.shared_sum += t.shared_sum;
    sum.optimizer += t.optimizer;
    for (size_t st = 0; st < sum.stages.size(); ++st) {
      sum.stages[st].busy += t.stages[st].busy;
      sum.stages[st].forward += t.stages[st].forward;
      sum.stages[st].waited += t.stages[st].waited;
      sum.stages[st].optimizer += t.stages[st].optimizer;
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  w.set_timing(false);

  BenchResult res;
  std::string where;
  for (size_t d = 0; d < devices.size(); ++d) where += (d ? "+" : "") + e.placement.devices[d];
  res.device = fmt::format("device parallel {}", where);
  res.threads = threads;
  res.batch = b;
  const double ms = 1000.0 / o.steps;  // seconds over the timed steps -> ms per step
  res.ms_per_step = secs * ms;
  res.images_per_second = double(images) / secs;
  res.gflops_per_second = 3.0 * double(Graph(e.model).flops_per_sample()) * res.images_per_second / 1e9;
  res.hidden_fraction = sum.shared_sum > 0 ? 0.0 : 1.0;  // the shared-gradient sum runs after the schedule
  res.microbatches = w.microbatches();
  res.bubble = w.bubble().fraction();
  StepBreakdown& p = res.parts;
  p.scope = "all stages";
  p.split = false;
  p.forward_backward_ms = sum.schedule * ms;
  p.optimizer_ms = sum.optimizer * ms;
  p.allreduce_ms = p.exposed_allreduce_ms = sum.shared_sum * ms;
  p.input_wait_ms = waited * ms;
  p.data = o.data;
  for (int s = 0; s < w.stages(); ++s) {
    const PipelineWorker::StageTime& t = sum.stages[size_t(s)];
    p.stages.push_back({e.placement.devices[size_t(w.stage(s).stage().device)], t.busy * ms, t.waited * ms, t.optimizer * ms,
                        t.forward * ms});
  }
  return res;
}

}  // namespace trainer
