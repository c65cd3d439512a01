// The data-parallel strategy: a replica per device of this process (ReplicaGroup), and its bench —
// timed steps on every replica's thread, rank 0's breakdown, each replica's last timeline.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/dist/launch.h"
#include "core/runtime/data_parallel/replica_group.h"
#include "core/runtime/strategy.h"

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Rank 0's per-layer times over `steps` more (profiled) steps of `batch` samples, slowest first;
// for a layer of matrix arithmetic (at least 32 FLOPs per output value: convolutions, dense, LSTM;
// not batch norm, activations, pooling or concat, which the memory bounds), its training GFLOP/s
// (3x the forward's FLOPs) and, with a ceiling, the share of it. Then, when there is any, the time
// spent summing input gradients outside the layers (Executor::LayerTime::sums), on a line of its own.
std::vector<std::string> layer_lines(Executor& g, int steps, int64_t batch, double ceiling) {
  std::vector<size_t> order(g.nodes().size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto& t = g.layer_times();
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t c) { return t[a].forward + t[a].backward > t[c].forward + t[c].backward; });
  std::vector<std::string> lines;
  for (size_t i : order) {
    const Layer& l = *g.nodes()[i].layer;
    const double secs = (t[i].forward + t[i].backward) / steps;
    const bool matrix = double(l.flops()) >= 32.0 * double(g.nodes()[i].shape.numel());
    const double gflops = matrix && secs > 0 ? 3.0 * double(l.flops()) * double(batch) / secs / 1e9 : 0;
    std::string rate;
    if (gflops > 0) rate = fmt::format("  {:8.1f} GFLOP/s", gflops);
    if (gflops > 0 && ceiling > 0) rate += fmt::format(" ({:.2f} of the ceiling)", gflops / ceiling);
    lines.push_back(fmt::format("{:<36} {:<18} {:<5} fwd {:8.3f} ms  bwd {:8.3f} ms{}", l.name(), l.type(),
                                dtype_name(g.dtype(int(i))), t[i].forward * 1000 / steps, t[i].backward * 1000 / steps,
                                rate));
  }
  double sums = 0;
  for (const auto& x : t) sums += x.sums;
  if (sums > 0)
    lines.push_back(fmt::format("Input gradients added where a tensor feeds several layers (or converted to its type), "
                                "outside the layers' bwd above: {:.3f} ms",
                                sums * 1000 / steps));
  return lines;
}

class DataParallel final : public Strategy {
 public:
  DataParallel(const TraineeSpec& t, const std::vector<Device>& devices, int threads)
      : group_(t, devices, threads), devices_(devices), threads_(threads) {}

  int size() const override { return group_.size(); }
  Trainee& trainee(int i) override { return group_.worker(i); }
  void run(const std::function<void(Trainee&)>& fn) override {
    group_.run([&](Worker& w) { fn(w); });
  }
  size_t device_memory_peak() override {
    size_t sum = 0;
    for (int r = 0; r < group_.size(); ++r) sum += group_.worker(r).replica().context().device_memory_peak();
    return sum;
  }
  BenchResult bench(std::vector<BenchInput>& inputs, const BenchOptions& o) override;

 private:
  ReplicaGroup group_;
  std::vector<Device> devices_;
  int threads_;
};

BenchResult DataParallel::bench(std::vector<BenchInput>& inputs, const BenchOptions& o) {
  const int n = group_.size();  // this process's replicas
  const int total = n * this_process().size, first = this_process().rank * n;
  Executor& g0 = group_.worker(0).replica().executor();
  const float lr = float(group_.worker(0).replica().optimizer().base_lr());

  // Wall seconds of every local rank's timed steps; rank 0's parts, input wait and samples.
  std::vector<double> seconds(static_cast<size_t>(n));
  std::vector<size_t> peak(static_cast<size_t>(n));  // device memory held by each replica's allocator
  std::vector<StepTimeline> timelines(static_cast<size_t>(n));
  StepTimes parts;
  double input_wait = 0;
  int64_t images = 0, global_batch = 0;
  uint64_t allocations = 0;
  double cpu = 0;  // the process's CPU seconds over the timed steps (rank `first` reads the clock)
  const int k = group_.worker(0).accumulate();
  int64_t reduced = 0;  // rank 0's gradient all-reduces in the timed steps
  group_.run([&](Worker& w) {
    const int local = w.rank() - first;
    BenchInput& in = inputs[size_t(local)];
    w.broadcast_parameters();
    bool stop = false;
    // One optimizer step: train.accumulate micro-batches (their parts' times added into `sum`).
    auto step = [&](double& wait, uint64_t seed, StepTimes* sum, int64_t* samples) {
      const int64_t n = bench_step(w, in, k, lr, seed, stop, wait, [&] {
        if (sum) *sum += w.step_times();
      });
      if (samples) *samples += n;
      if (w.rank() == 0) global_batch = n;
    };
    double warm_wait = 0;
    for (int s = 0; s < o.warmup; ++s) step(warm_wait, uint64_t(s), nullptr, nullptr);
    w.replica().context().synchronize();
    w.control().barrier();
    // The breakdown synchronises the device at each part's end (Worker::set_timing): free on the
    // CPU, whose ops are synchronous, but it would stall a GPU's queue, so a GPU's timed steps run
    // without it and the breakdown comes from as many steps after them.
    const bool gpu = !w.replica().context().device().is_cpu();
    w.set_timing(!gpu);
    StepTimes sum;
    double waited = 0;
    int64_t samples = 0;
    const uint64_t calls0 = allocator_calls();
    const double cpu0 = w.rank() == first ? process_cpu_seconds() : 0.0;
    const int64_t reduced0 = w.reduced_steps();
    const Clock::time_point t0 = Clock::now();
    for (int s = 0; s < o.steps; ++s) step(waited, uint64_t(o.warmup + s), gpu ? nullptr : &sum, &samples);
    w.replica().context().synchronize();
    w.control().barrier();
    seconds[size_t(local)] = since(t0);
    if (w.rank() == first) {  // every local replica's, between the barriers
      allocations = allocator_calls() - calls0;
      cpu = process_cpu_seconds() - cpu0;
    }
    if (w.rank() == 0) reduced = w.reduced_steps() - reduced0;
    if (gpu) {
      w.set_timing(true);
      double unused = 0;
      for (int s = 0; s < o.steps; ++s) step(unused, uint64_t(o.warmup + s), &sum, nullptr);
      w.replica().context().synchronize();
    }
    timelines[size_t(local)] = w.timeline();
    w.set_timing(false);
    peak[size_t(local)] = w.replica().context().device_memory_peak();
    if (w.rank() == 0) {
      parts = sum;
      input_wait = waited;
      images = samples;
    }
    if (o.layers) {  // every rank steps (they meet in the all-reduces); rank 0 is profiled
      Executor& g = w.replica().executor();
      if (w.rank() == 0) g.set_profiling(true);
      for (int s = 0; s < o.steps; ++s) step(warm_wait, uint64_t(s), nullptr, nullptr);
      g.set_profiling(false);
    }
  });

  const double secs = *std::max_element(seconds.begin(), seconds.end());
  const double ms = 1000.0 / o.steps;  // seconds over the timed steps -> ms per step
  BenchResult res;
  res.device = n == 1 ? devices_[0].str() : fmt::format("{}x {}", n, devices_[0].is_cpu() ? "cpu" : devices_[0].str());
  res.threads = threads_;
  res.batch = global_batch;
  res.ms_per_step = secs * ms;
  res.images_per_second = double(images) / secs;
  res.gflops_per_second = 3.0 * double(g0.flops_per_sample()) * res.images_per_second / 1e9;
  res.allocations_per_step = double(allocations) / o.steps;
  res.cpu_cores = seconds[0] > 0 ? cpu / seconds[0] : 0;
  for (size_t b : peak) res.peak_device_mb += double(b) / (1 << 20);
  res.accumulate = k;
  res.gradient_allreduces_per_step = double(reduced) / o.steps;
  res.hidden_fraction = parts.allreduce > 0 ? std::clamp(1.0 - parts.exposed / parts.allreduce, 0.0, 1.0) : 1.0;
  StepBreakdown& p = res.parts;
  p.scope = fmt::format("rank 0 of {}", total);
  p.forward_ms = parts.forward * ms;
  p.backward_ms = parts.backward * ms;
  p.forward_backward_ms = p.forward_ms + p.backward_ms;
  p.optimizer_ms = parts.optimizer * ms;
  p.allreduce_ms = parts.allreduce * ms;
  p.exposed_allreduce_ms = parts.exposed * ms;
  p.skew_ms = parts.skew * ms;
  for (int r = 0; r < n; ++r) res.timelines.emplace_back(first + r, timelines[size_t(r)]);
  p.input_wait_ms = input_wait * ms;
  p.data = !inputs[0].synthetic();
  if (o.layers) res.layer_lines = layer_lines(g0, o.steps, global_batch / total, o.ceiling_gflops);
  return res;
}

[[maybe_unused]] const bool registered = [] {
  StrategyType t;
  t.devices = [](const TraineeSpec&, const DevicesSpec& d, std::vector<std::string>*) { return select_devices(d); };
  t.local_replicas = [](const TraineeSpec&, const std::vector<Device>& devices) { return int(devices.size()); };
  t.threads = [](const DevicesSpec& d, const std::vector<Device>& devices) {
    return threads_per_replica(d, int(devices.size()));
  };
  t.make = [](const TraineeSpec& spec, const std::vector<Device>& devices, int threads) -> std::unique_ptr<Strategy> {
    return std::make_unique<DataParallel>(spec, devices, threads);
  };
  register_strategy(StrategyKind::DataParallel, std::move(t));
  return true;
}();

}  // namespace
}  // namespace trainer
