// The device-parallel strategy: one model cut over devices and pipelined (PipelineCopy), and its
// part of a bench result — the bubble, and each stage's share of a step by its placement label.
#include <fmt/format.h>

#include "core/runtime/device_parallel/pipeline_copy.h"
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

 protected:
  void describe(BenchResult& r, const BenchOptions& o) override;

 private:
  PipelineCopy worker_;
  std::vector<std::string> labels_;
  int threads_;
};

void DeviceParallel::describe(BenchResult& r, const BenchOptions&) {
  PipelineCopy& w = worker_;
  std::string where;
  for (size_t d = 0; d < labels_.size(); ++d) where += (d ? "+" : "") + labels_[d];
  r.device = fmt::format("device parallel {}", where);
  r.threads = threads_;
  int64_t flops = 0;
  for (int s = 0; s < w.stages(); ++s) flops += w.stage(s).graph().flops_per_sample();
  r.gflops_per_second = 3.0 * double(flops) * r.images_per_second / 1e9;
  r.hidden_fraction = r.parts.allreduce_ms > 0 ? 0.0 : 1.0;  // the shared-gradient sum runs after the schedule
  r.microbatches = w.microbatches();
  r.bubble = w.bubble().fraction();
  r.parts.scope = "all stages";
  for (int s = 0; s < w.stages() && size_t(s) < r.parts.stages.size(); ++s)
    r.parts.stages[size_t(s)].device = labels_[size_t(w.stage(s).stage().device)];
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
