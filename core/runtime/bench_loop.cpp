// The one bench loop: every strategy's timed steps, on its trainees' threads.
#include "core/runtime/bench_loop.h"

#include <algorithm>
#include <chrono>

#include "core/graph/executor.h"
#include "core/runtime/strategy.h"
#include "core/tensor/allocator.h"

namespace trainer {
namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void bench_read(StepReads& pending, bool all) {
  for (StepRead r; pending.next(r, all);) r.stats.get();
}

int64_t bench_step(Trainee& t, BenchInput& in, int k, float lr, uint64_t seed, bool& stop, double& waited,
                   StepReads& pending, const std::function<void()>& after) {
  int64_t samples = 0;
  for (int i = 0; i < k; ++i) {
    const Batch& b = in.next(waited);
    samples += b.global_size;
    // Every micro-batch of a synthetic input is the same: the step scores k times its labels.
    pending.push({t.step(b, lr, seed, stop, MicroStep{i, k, k > 1 ? int64_t(k) * scored_labels(b) : 0})});
    bench_read(pending, false);
    if (after) after();
  }
  return samples;
}

BenchResult Strategy::bench(std::vector<BenchInput>& inputs, const BenchOptions& o) {
  const int n = size(), k = std::max(1, o.accumulate);
  std::vector<double> seconds(static_cast<size_t>(n));  // wall seconds of each trainee's timed steps
  // Trainee 0's (this process's first: global rank 0 in process 0) parts, input wait and samples;
  // the process's CPU seconds and allocator calls over the timed steps, between the barriers.
  StepBreakdown parts;
  double input_wait = 0, cpu = 0;
  int64_t images = 0, batch = 0, reduced = 0;
  uint64_t allocations = 0, syncs = 0;
  const bool layers = o.layers && trainee(0).layers() != nullptr;
  std::vector<char> recorded(static_cast<size_t>(n));  // each trainee's last timed step replayed a recording
  run([&](Trainee& t) {
    int local = 0;
    while (&trainee(local) != &t) ++local;
    const bool lead = local == 0;
    BenchInput& in = inputs[size_t(local)];
    t.broadcast_parameters();
    bool stop = false;
    double warm_wait = 0;
    StepReads pending;
    for (int s = 0; s < o.warmup; ++s) bench_step(t, in, k, o.lr, uint64_t(s), stop, warm_wait, pending);
    bench_read(pending, true);
    t.settle();
    t.reset_counters();
    // The parts synchronise the device at each boundary (set_timing): free on the CPU, whose ops
    // are synchronous, but it would stall a GPU's queue, so a GPU's timed steps run without it
    // and the parts come from as many steps after them.
    const bool gpu = t.on_gpu();
    t.set_timing(!gpu);
    StepBreakdown sum;
    auto add_parts = [&] { sum += t.step_parts(); };
    double waited = 0;
    int64_t samples = 0, last = 0;
    const uint64_t calls0 = allocator_calls(), waits0 = host_waits();
    const double cpu0 = lead ? process_cpu_seconds() : 0.0;
    const int64_t reduced0 = t.reduced_steps();
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < o.steps; ++s) {
      last = bench_step(t, in, k, o.lr, uint64_t(o.warmup + s), stop, waited, pending,
                        gpu ? std::function<void()>() : add_parts);
      samples += last;
    }
    t.settle();  // the frame (a wait not counted), then the last steps' statistics, landed by now
    bench_read(pending, true);
    seconds[size_t(local)] = since(t0);
    recorded[size_t(local)] = t.step_recorded();
    if (lead) {  // every local trainee's, between the barriers
      allocations = allocator_calls() - calls0;
      syncs = host_waits() - waits0;
      cpu = process_cpu_seconds() - cpu0;
      reduced = t.reduced_steps() - reduced0;
    }
    if (gpu) {
      t.set_timing(true);
      double unused = 0;
      for (int s = 0; s < o.steps; ++s) bench_step(t, in, k, o.lr, uint64_t(o.warmup + s), stop, unused, pending, add_parts);
      bench_read(pending, true);
      t.settle();
    }
    t.set_timing(false);
    if (lead) {
      parts = sum;
      input_wait = waited;
      images = samples;
      batch = last;
    }
    if (layers) {  // every trainee steps (they meet in the all-reduces); global rank 0 is profiled
      Executor* g = t.rank() == 0 ? t.layers() : nullptr;
      if (g) g->set_profiling(true);
      // Timing on every trainee: each takes the ordinary step as the profiled one must (a recorded
      // step's collectives would not meet the ordinary step's bucketed ones).
      t.set_timing(true);
      for (int s = 0; s < o.steps; ++s) bench_step(t, in, k, o.lr, uint64_t(s), stop, warm_wait, pending);
      bench_read(pending, true);
      t.set_timing(false);
      if (g) g->set_profiling(false);
    }
  });
  const double secs = *std::max_element(seconds.begin(), seconds.end());
  BenchResult r;
  r.batch = batch;
  r.ms_per_step = 1e3 * secs / o.steps;
  r.images_per_second = secs > 0 ? double(images) / secs : 0;
  r.allocations_per_step = double(allocations) / o.steps;
  r.host_syncs_per_step = double(syncs) / o.steps;
  r.cpu_cores = seconds[0] > 0 ? cpu / seconds[0] : 0;
  r.peak_device_mb = double(device_memory_peak()) / (1 << 20);
  r.accumulate = k;
  r.gradient_allreduces_per_step = double(reduced) / o.steps;
  r.step_graph = std::all_of(recorded.begin(), recorded.end(), [](char c) { return c != 0; });
  r.parts = parts.per_step(o.steps);
  r.parts.input_wait_ms = 1e3 * input_wait / o.steps;
  r.parts.data = !inputs[0].synthetic();
  describe(r, o);
  return r;
}

}  // namespace trainer
