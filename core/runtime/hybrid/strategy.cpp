// The hybrid strategy: data parallelism over R copies of an S-stage pipeline on R x S devices —
// a PipelineWorker per copy, stage s of every copy joined by a communicator of its own — and its
// bench.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/dist/device_comms.h"
#include "core/runtime/device_parallel/pipeline_worker.h"
#include "core/runtime/rank_threads.h"
#include "core/runtime/strategy.h"

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;

// The placement's labels, one stage slot each, in the order placement.devices lists them.
int stage_slots(const TraineeSpec& t) { return std::max<int>(1, int(t.placement.devices.size())); }

class Hybrid final : public Strategy {
 public:
  Hybrid(const TraineeSpec& t, const std::vector<Device>& devices, int threads) : threads_(threads) {
    const int S = stage_slots(t), R = int(devices.size()) / S;
    for (int r = 0; r < R; ++r)
      copies_.push_back(std::make_unique<PipelineWorker>(
          t, std::vector<Device>(devices.begin() + r * S, devices.begin() + (r + 1) * S), threads));
    // Stage s of every copy: one communicator group; the copies' driving threads: another.
    const int stages = copies_[0]->stages();
    std::vector<std::vector<Communicator*>> per_copy(static_cast<size_t>(R));
    for (int s = 0; s < stages; ++s) {
      std::vector<Device> devs;
      std::vector<OpContext*> ctxs;
      for (auto& c : copies_) {
        devs.push_back(c->stage(s).context().device());
        ctxs.push_back(&c->stage(s).context());
      }
      stage_comms_.push_back(make_communicators(devs, ctxs));
      for (int r = 0; r < R; ++r) per_copy[size_t(r)].push_back(stage_comms_.back()[size_t(r)].get());
      if (s == 0) ctl_comms_ = make_communicators(devs, ctxs);
    }
    for (int r = 0; r < R; ++r) copies_[size_t(r)]->attach(r, per_copy[size_t(r)], ctl_comms_[size_t(r)].get());
  }

  int size() const override { return int(copies_.size()); }
  Trainee& trainee(int i) override { return *copies_[size_t(i)]; }
  void run(const std::function<void(Trainee&)>& fn) override {
    run_rank_threads(
        size(), [&](int r) { fn(*copies_[size_t(r)]); }, [](int r) { return fmt::format("pipeline copy {}", r); },
        [&](const std::string& why) {
          for (auto& group : stage_comms_) group[0]->abort(why);
          ctl_comms_[0]->abort(why);
        });
  }
  size_t device_memory_peak() override {
    size_t sum = 0;
    for (auto& c : copies_)
      for (int s = 0; s < c->stages(); ++s) sum += c->stage(s).context().device_memory_peak();
    return sum;
  }
  BenchResult bench(std::vector<BenchInput>& inputs, const BenchOptions& o) override;

 private:
  std::vector<std::unique_ptr<PipelineWorker>> copies_;
  std::vector<std::vector<std::unique_ptr<Communicator>>> stage_comms_;  // [stage][copy]
  std::vector<std::unique_ptr<Communicator>> ctl_comms_;                 // [copy]
  int threads_;
};

// Timed steps on every copy's thread: throughput, and copy 0's pipeline bubble and parts.
BenchResult Hybrid::bench(std::vector<BenchInput>& inputs, const BenchOptions& o) {
  const float lr = float(copies_[0]->stage(0).optimizer().base_lr());
  double seconds = 0, cpu = 0, waited = 0;
  int64_t images = 0, batch = 0;
  uint64_t allocations = 0;
  PipelineWorker::StepTimes sum;
  const int k = copies_[0]->accumulate();
  int64_t reduced = 0;
  run([&](Trainee& t) {
    auto& w = static_cast<PipelineWorker&>(t);
    BenchInput& in = inputs[size_t(w.rank())];
    bool stop = false;
    double warm = 0, wait = 0;
    w.broadcast_parameters();
    for (int s = 0; s < o.warmup; ++s) bench_step(w, in, k, lr, uint64_t(s), stop, warm);
    w.reset_bubble();
    const uint64_t calls0 = allocator_calls();
    const double cpu0 = process_cpu_seconds();
    const int64_t reduced0 = w.reduced_steps();
    const auto t0 = Clock::now();
    for (int s = 0; s < o.steps; ++s) {
      // Each optimizer step ends in a collective: the copies keep step.
      const int64_t n = bench_step(w, in, k, lr, uint64_t(o.warmup + s), stop, wait, [&] {
        if (w.rank() != 0) return;
        const PipelineWorker::StepTimes& st = w.step_times();
        sum.schedule += st.schedule;
        sum.shared_sum += st.shared_sum;
        sum.allreduce += st.allreduce;
        sum.optimizer += st.optimizer;
      });
      if (w.rank() == 0) images += n, batch = n;
    }
    if (w.rank() == 0) {
      seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      cpu = process_cpu_seconds() - cpu0;
      allocations = allocator_calls() - calls0;
      waited = wait;
      reduced = w.reduced_steps() - reduced0;
    }
  });
  BenchResult res;
  res.device = fmt::format("hybrid {} copies x {} stages", copies_.size(), copies_[0]->stages());
  res.threads = threads_;
  res.batch = batch;
  const double ms = 1000.0 / o.steps;
  res.ms_per_step = seconds * ms;
  res.images_per_second = seconds > 0 ? double(images) / seconds : 0;
  int64_t flops = 0;
  for (int s = 0; s < copies_[0]->stages(); ++s) flops += copies_[0]->stage(s).graph().flops_per_sample();
  res.gflops_per_second = 3.0 * double(flops) * res.images_per_second / 1e9;
  res.allocations_per_step = double(allocations) / o.steps;
  res.cpu_cores = seconds > 0 ? cpu / seconds : 0;
  res.peak_device_mb = double(device_memory_peak()) / (1 << 20);
  // Each stage's sum over the copies starts at the end of its own backward, while the stages
  // before it are still in theirs; how much of it that hides is not measured (reported as 0).
  res.hidden_fraction = 0;
  res.microbatches = copies_[0]->microbatches();
  res.accumulate = k;
  res.gradient_allreduces_per_step = double(reduced) / o.steps;  // copy 0's sums over the copies
  res.bubble = copies_[0]->bubble().fraction();
  StepBreakdown& p = res.parts;
  p.scope = "copy 0, all stages";
  p.split = false;
  p.forward_backward_ms = sum.schedule * ms;
  p.optimizer_ms = sum.optimizer * ms;
  p.allreduce_ms = sum.allreduce * ms;
  p.input_wait_ms = waited * ms;
  p.data = !inputs[0].synthetic();
  return res;
}

[[maybe_unused]] const bool registered = [] {
  StrategyType t;
  // R x S devices: --cpu N (virtual CPU devices) or --gpus, copy r's stage s on device r*S + s.
  t.devices = [](const TraineeSpec& spec, const DevicesSpec& d, std::vector<std::string>*) {
    std::vector<Device> devices = select_devices(d);
    const int S = stage_slots(spec);
    if (devices.size() < size_t(2 * S) || devices.size() % size_t(S) != 0)
      throw DeviceError(fmt::format("strategy hybrid places {} stages per copy: it needs a multiple of {} devices, at least "
                                    "{} (--cpu {} or --gpus with {} GPUs for 2 copies), not {}",
                                    S, S, 2 * S, 2 * S, 2 * S, devices.size()));
    return devices;
  };
  t.local_replicas = [](const TraineeSpec& spec, const std::vector<Device>& devices) {
    return int(devices.size()) / stage_slots(spec);
  };
  t.threads = [](const DevicesSpec& d, const std::vector<Device>& devices) {
    return threads_per_replica(d, int(devices.size()));
  };
  t.make = [](const TraineeSpec& spec, const std::vector<Device>& devices, int threads) -> std::unique_ptr<Strategy> {
    return std::make_unique<Hybrid>(spec, devices, threads);
  };
  register_strategy(StrategyKind::Hybrid, std::move(t));
  return true;
}();

}  // namespace
}  // namespace trainer
