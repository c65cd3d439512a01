// Timed data-parallel training steps, one worker thread per replica, on synthetic batches or the
// config's training data; and the input side shared with the device-parallel bench.
#include "core/engine/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "core/dist/launch.h"
#include "core/engine/devices.h"
#include "core/engine/replica.h"
#include "core/engine/replica_group.h"

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// How many classes synthetic labels draw from: the loss head's outputs (two for one output unit,
// a binary classifier).
int label_classes(const Experiment& e) {
  Graph g(e.model);  // shapes only, no memory
  auto cpu = make_context(Device::cpu(0));
  auto loss = make_loss(e.train.loss, *cpu);
  return int(std::max<int64_t>(2, g.nodes()[size_t(loss_head(g, *loss).logits)].shape[0]));
}

// Rank 0's per-layer times over `steps` more (profiled) steps, slowest first.
std::vector<std::string> layer_lines(Graph& g, int steps) {
  std::vector<size_t> order(g.nodes().size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto& t = g.layer_times();
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t c) { return t[a].forward + t[a].backward > t[c].forward + t[c].backward; });
  std::vector<std::string> lines;
  for (size_t i : order)
    lines.push_back(fmt::format("{:<36} {:<18} {:<5} fwd {:8.3f} ms  bwd {:8.3f} ms", g.nodes()[i].layer->name(),
                                g.nodes()[i].layer->type(), dtype_name(g.dtype(int(i))), t[i].forward * 1000 / steps,
                                t[i].backward * 1000 / steps));
  return lines;
}

}  // namespace

DataSetup bench_data(const Experiment& e, const BenchOptions& o, int replicas, int first_rank, int local) {
  DataSetup d = setup_data(e, o.base_dir, replicas, first_rank, local);
  if (d.train_loaders[0]->batches_per_epoch() == 0)
    throw DataError(fmt::format("the training set has {} samples, fewer than one global batch of {} (drop_last is on)",
                                d.train->size(), e.train.batch_size * replicas));
  return d;
}

BenchInput::BenchInput(const Experiment& e, int rank, int replicas, Loader* loader) : loader_(loader) {
  if (loader_) {
    steps_per_epoch_ = loader_->batches_per_epoch();
    if (e.train.steps_per_epoch > 0) steps_per_epoch_ = std::min(steps_per_epoch_, e.train.steps_per_epoch);
    loader_->start_epoch(0);
    return;
  }
  // One fixed batch of normal noise and uniform labels, a different one per rank.
  const int64_t b = e.train.batch_size;
  const int classes = label_classes(e);
  batch_.images = Tensor::empty(e.model.input.with_batch(b));
  batch_.labels = Tensor::empty(Shape{b}, DType::I32);
  batch_.size = b;
  batch_.global_size = b * replicas;
  std::mt19937_64 rng(e.seed + uint64_t(rank));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < batch_.images.numel(); ++i) batch_.images.f32()[i] = normal(rng);
  for (int64_t i = 0; i < b; ++i) batch_.labels.i32()[i] = int32_t(rng() % uint64_t(classes));
}

const Batch& BenchInput::next(double& waited) {
  if (!loader_) return batch_;
  const Clock::time_point t0 = Clock::now();
  // An epoch ends when the loader runs dry or after train.steps_per_epoch steps, as in training;
  // the next one starts at once (its first batches are then part of the wait).
  if (step_ == steps_per_epoch_ || !loader_->next(batch_)) {
    loader_->start_epoch(++epoch_);
    step_ = 0;
    if (!loader_->next(batch_)) throw DataError("the training loader delivered no batch for a new epoch");
  }
  ++step_;
  waited += since(t0);
  return batch_;
}

BenchResult bench(const Experiment& e, const BenchOptions& o) {
  if (e.strategy == "device_parallel") return bench_pipeline(e, o);
  const std::vector<Device> devices = select_devices(e.devices);
  const int n = int(devices.size());  // this process's replicas
  const int total = n * this_process().size, first = this_process().rank * n;
  const int threads = threads_per_replica(e.devices, n);
  DataSetup data;  // opened first: missing data fails before the replicas are built
  if (o.data) data = bench_data(e, o, total, first, n);
  ReplicaGroup group(e, devices, threads);
  Graph& g0 = group.worker(0).replica().graph();
  const float lr = float(group.worker(0).replica().optimizer().base_lr());

  // Wall seconds of every local rank's timed steps; rank 0's parts, input wait and samples.
  std::vector<double> seconds(static_cast<size_t>(n));
  std::vector<size_t> peak(static_cast<size_t>(n));  // device memory held by each replica's allocator
  std::vector<StepTimeline> timelines(static_cast<size_t>(n));
  StepTimes parts;
  double input_wait = 0;
  int64_t images = 0;
  group.run([&](Worker& w) {
    const int local = w.rank() - first;
    w.broadcast_parameters();
    BenchInput in(e, w.rank(), total, o.data ? data.train_loaders[size_t(local)].get() : nullptr);
    bool stop = false;
    double warm_wait = 0;
    for (int s = 0; s < o.warmup; ++s) w.train_step(in.next(warm_wait), lr, uint64_t(s), stop);
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
    const Clock::time_point t0 = Clock::now();
    for (int s = 0; s < o.steps; ++s) {
      const Batch& b = in.next(waited);
      samples += b.global_size;
      w.train_step(b, lr, uint64_t(o.warmup + s), stop);
      if (!gpu) sum += w.step_times();
    }
    w.replica().context().synchronize();
    w.control().barrier();
    seconds[size_t(local)] = since(t0);
    if (gpu) {
      w.set_timing(true);
      double unused = 0;
      for (int s = 0; s < o.steps; ++s) {
        w.train_step(in.next(unused), lr, uint64_t(o.warmup + s), stop);
        sum += w.step_times();
      }
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
      Graph& g = w.replica().graph();
      if (w.rank() == 0) g.set_profiling(true);
      for (int s = 0; s < o.steps; ++s) w.train_step(in.next(warm_wait), lr, uint64_t(s), stop);
      g.set_profiling(false);
    }
  });

  const double secs = *std::max_element(seconds.begin(), seconds.end());
  const double ms = 1000.0 / o.steps;  // seconds over the timed steps -> ms per step
  BenchResult res;
  res.device = n == 1 ? devices[0].str() : fmt::format("{}x {}", n, devices[0].is_cpu() ? "cpu" : devices[0].str());
  res.threads = threads;
  res.batch = e.train.batch_size * total;
  res.ms_per_step = secs * ms;
  res.images_per_second = double(images) / secs;
  res.gflops_per_second = 3.0 * double(g0.flops_per_sample()) * res.images_per_second / 1e9;
  for (size_t b : peak) res.peak_device_mb += double(b) / (1 << 20);
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
  p.data = o.data;
  if (o.layers) res.layer_lines = layer_lines(g0, o.steps);
  return res;
}

}  // namespace trainer
