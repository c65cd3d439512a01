// The device-parallel strategy: one model cut over devices and pipelined (PipelineWorker), and its
// bench — timed GPipe steps, the bubble, and each stage's share of a step.
#include <fmt/format.h>

#include <chrono>

#include "core/runtime/device_parallel/pipeline_worker.h"
#include "core/runtime/strategy.h"

namespace trainer {
namespace {

class DeviceParallel final : public Strategy {
 public:
  DeviceParallel(const TraineeSpec& t, const std::vector<Device>& devices, int threads)
      : worker_(t, devices, threads), labels_(t.placement.devices), threads_(threads) {}

  int size() const override { return 1; }
  Trainee& trainee(int) override { return worker_; }
  // The stages have threads of their own; the loop drives the pipeline from the calling thread.
  void run(const std::function<void(Trainee&)>& fn) override { fn(worker_); }
  size_t device_memory_peak() override {
    size_t sum = 0;
    for (int s = 0; s < worker_.stages(); ++s) sum += worker_.stage(s).context().device_memory_peak();
    return sum;
  }
  BenchResult bench(std::vector<BenchInput>& inputs, const BenchOptions& o) override;

 private:
  PipelineWorker worker_;
  std::vector<std::string> labels_;
  int threads_;
};

BenchResult DeviceParallel::bench(std::vector<BenchInput>& inputs, const BenchOptions& o) {
  using Clock = std::chrono::steady_clock;
  PipelineWorker& w = worker_;
  BenchInput& in = inputs[0];
  const float lr = float(w.stage(0).optimizer().base_lr());
  const int k = w.accumulate();
  bool stop = false;
  double warm_wait = 0;
  for (int s = 0; s < o.warmup; ++s) bench_step(w, in, k, lr, uint64_t(s), stop, warm_wait);
  w.reset_bubble();
  w.set_timing(true);
  PipelineWorker::StepTimes sum;
  sum.stages.resize(size_t(w.stages()));
  double waited = 0;
  int64_t images = 0, batch = 0;
  const uint64_t calls0 = allocator_calls();
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  for (int s = 0; s < o.steps; ++s) {
    batch = bench_step(w, in, k, lr, uint64_t(o.warmup + s), stop, waited, [&] {  // each micro-batch's parts
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
    });
    images += batch;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = process_cpu_seconds() - cpu0;
  const uint64_t allocations = allocator_calls() - calls0;
  w.set_timing(false);

  BenchResult res;
  std::string where;
  for (size_t d = 0; d < labels_.size(); ++d) where += (d ? "+" : "") + labels_[d];
  res.device = fmt::format("device parallel {}", where);
  res.threads = threads_;
  res.batch = batch;
  const double ms = 1000.0 / o.steps;  // seconds over the timed steps -> ms per step
  res.ms_per_step = secs * ms;
  res.images_per_second = double(images) / secs;
  int64_t flops = 0;
  for (int s = 0; s < w.stages(); ++s) flops += w.stage(s).graph().flops_per_sample();
  res.gflops_per_second = 3.0 * double(flops) * res.images_per_second / 1e9;
  res.allocations_per_step = double(allocations) / o.steps;
  res.cpu_cores = secs > 0 ? cpu / secs : 0;
  res.peak_device_mb = double(device_memory_peak()) / (1 << 20);
  res.hidden_fraction = sum.shared_sum > 0 ? 0.0 : 1.0;  // the shared-gradient sum runs after the schedule
  res.microbatches = w.microbatches();
  res.accumulate = k;
  res.gradient_allreduces_per_step = 0;  // one copy: nothing is all-reduced
  res.bubble = w.bubble().fraction();
  StepBreakdown& p = res.parts;
  p.scope = "all stages";
  p.split = false;
  p.forward_backward_ms = sum.schedule * ms;
  p.optimizer_ms = sum.optimizer * ms;
  p.allreduce_ms = p.exposed_allreduce_ms = sum.shared_sum * ms;
  p.input_wait_ms = waited * ms;
  p.data = !in.synthetic();
  for (int s = 0; s < w.stages(); ++s) {
    const PipelineWorker::StageTime& t = sum.stages[size_t(s)];
    p.stages.push_back({labels_[size_t(w.stage(s).stage().device)], t.busy * ms, t.waited * ms, t.optimizer * ms,
                        t.forward * ms});
  }
  return res;
}

[[maybe_unused]] const bool registered = [] {
  StrategyType t;
  t.devices = [](const TraineeSpec& spec, const DevicesSpec& d, std::vector<std::string>* notes) {
    return placement_devices(spec.placement, d, notes);
  };
  t.local_replicas = [](const TraineeSpec&, const std::vector<Device>&) { return 1; };
  // The CPU stages share the cores but one for each GPU stage: its thread launches and waits for
  // every micro-batch of its stage. With all 16 cores of an H200 machine in the CPU stage's team
  // beside it, configs/model_parallel.yaml (gpu:0 + cpu) ran at 2,314 img/s (M=1) and 2,516
  // (M=4); with 15 threads 5,451 and 4,978 (docs/gpu-runs/2026-11-27-h200.md).
  t.threads = [](const DevicesSpec& d, const std::vector<Device>& devices) {
    int cpu = 0;
    for (const Device& x : devices) cpu += x.is_cpu();
    return threads_per_replica(d, std::max(1, cpu), cpu > 0 ? int(devices.size()) - cpu : 0);
  };
  t.make = [](const TraineeSpec& spec, const std::vector<Device>& devices, int threads) -> std::unique_ptr<Strategy> {
    return std::make_unique<DeviceParallel>(spec, devices, threads);
  };
  register_strategy(StrategyKind::DeviceParallel, std::move(t));
  return true;
}();

}  // namespace
}  // namespace trainer
