// The data-parallel strategy: a replica per device of this process (ReplicaGroup), and its part
// of a bench result — rank 0's breakdown, each replica's last timeline, per-layer times.
#include <fmt/format.h>

#include <algorithm>

#include "core/dist/launch.h"
#include "core/runtime/data_parallel/replica_group.h"
#include "core/runtime/strategy.h"

namespace trainer {
namespace {

// Rank 0's per-layer times over `steps` more (profiled) steps of `batch` samples, slowest first;
// for a layer of matrix arithmetic (at least 32 FLOPs per output value: convolutions, dense, LSTM;
// not batch norm, activations, pooling or concat, which the memory bounds), its training GFLOP/s
// (3x the forward's FLOPs) and, with a ceiling, the share of it. Then, when there is any, the time
// spent summing input gradients outside the layers (Executor::LayerTime::sums), on a line of its own;
// last, the bytes of the step's buffers (the execution plan's arena).
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
  // Where the step's activation memory goes (the plan's one arena; parameters, optimizer state and
  // kernels' workspaces are apart): a GPU's peak beside it says how much is the rest.
  const ExecutionPlan& p = g.plan();
  lines.push_back(fmt::format("Step buffers (the plan's arena, one allocation per copy): {:.1f} MiB: outputs and their "
                              "converted copies {:.1f}, output gradients {:.1f}",
                              double(p.arena_bytes) / (1 << 20), double(p.activation_bytes) / (1 << 20),
                              double(p.gradient_bytes) / (1 << 20)));
  return lines;
}

class DataParallel final : public Strategy {
 public:
  DataParallel(const TraineeSpec& t, const std::vector<Device>& devices, int threads)
      : group_(t, devices, threads), devices_(devices), threads_(threads) {}

  int size() const override { return group_.size(); }
  Trainee& trainee(int i) override { return group_.worker(i); }
  void run(const std::function<void(Trainee&)>& fn) override {
    group_.run([&](ReplicaCopy& w) { fn(w); });
  }
  size_t device_memory_peak() override {
    size_t sum = 0;
    for (int r = 0; r < group_.size(); ++r) sum += group_.worker(r).replica().context().device_memory_peak();
    return sum;
  }

 protected:
  void describe(BenchResult& r, const BenchOptions& o) override;

 private:
  ReplicaGroup group_;
  std::vector<Device> devices_;
  int threads_;
};

void DataParallel::describe(BenchResult& r, const BenchOptions& o) {
  const int n = group_.size();  // this process's replicas
  const int total = n * this_process().size, first = this_process().rank * n;
  Executor& g0 = group_.worker(0).replica().executor();
  r.device = n == 1 ? devices_[0].str() : fmt::format("{}x {}", n, devices_[0].is_cpu() ? "cpu" : devices_[0].str());
  r.threads = threads_;
  r.gflops_per_second = 3.0 * double(g0.flops_per_sample()) * r.images_per_second / 1e9;
  const StepBreakdown& p = r.parts;
  r.hidden_fraction = p.allreduce_ms > 0 ? std::clamp(1.0 - p.exposed_allreduce_ms / p.allreduce_ms, 0.0, 1.0) : 1.0;
  r.parts.scope = fmt::format("rank 0 of {}", total);
  for (int i = 0; i < n; ++i) r.timelines.emplace_back(first + i, group_.worker(i).timeline());
  if (o.layers) r.layer_lines = layer_lines(g0, o.steps, r.batch / total, o.ceiling_gflops);
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
