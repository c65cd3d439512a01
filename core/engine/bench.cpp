// Timed training steps on fixed random batches, one worker thread per replica.
#include "core/engine/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "core/engine/devices.h"
#include "core/engine/replica_group.h"

namespace trainer {

BenchResult bench(const Experiment& e, const BenchOptions& o) {
  if (e.strategy == "device_parallel") return bench_pipeline(e, o);
  std::vector<Device> devices = select_devices(e.devices);
  int n = int(devices.size());
  int threads = threads_per_replica(e.devices, n);
  ReplicaGroup group(e, devices, threads);
  Graph& g0 = group.worker(0).replica().graph();
  int64_t b = e.train.batch_size;
  int classes = int(g0.nodes()[size_t(group.worker(0).replica().logits_node())].shape[0]);
  float lr = float(group.worker(0).replica().optimizer().base_lr());

  std::vector<double> seconds(static_cast<size_t>(n)), reduce(seconds), exposed(seconds);
  group.run([&](Worker& w) {
      int r = w.rank();
      w.broadcast_parameters();
      Batch batch;
      batch.images = Tensor::empty(e.model.input.with_batch(b));
      batch.labels = Tensor::empty(Shape{b}, DType::I32);
      batch.size = b;
      batch.global_size = b * n;
      std::mt19937_64 rng(e.seed + uint64_t(r));
      std::normal_distribution<float> normal(0.f, 1.f);
      for (int64_t i = 0; i < batch.images.numel(); ++i) batch.images.f32()[i] = normal(rng);
      for (int64_t i = 0; i < b; ++i) batch.labels.i32()[i] = int32_t(rng() % uint64_t(classes));
      bool stop = false;
      for (int s = 0; s < o.warmup; ++s) w.train_step(batch, lr, uint64_t(s), stop);
      w.replica().context().synchronize();
      w.control().barrier();
      auto t0 = std::chrono::steady_clock::now();
      double red = 0, exp = 0;
      for (int s = 0; s < o.steps; ++s) {
        w.train_step(batch, lr, uint64_t(o.warmup + s), stop);
        red += w.buckets().reduce_seconds();
        exp += w.buckets().exposed_seconds();
      }
      w.replica().context().synchronize();
      w.control().barrier();
      seconds[size_t(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      reduce[size_t(r)] = red;
      exposed[size_t(r)] = exp;
      if (r == 0 && o.layers) {
        Graph& g = w.replica().graph();
        g.set_profiling(true);
        for (int s = 0; s < o.steps; ++s) w.train_step(batch, lr, uint64_t(s), stop);
        g.set_profiling(false);
      } else if (o.layers) {
        for (int s = 0; s < o.steps; ++s) w.train_step(batch, lr, uint64_t(s), stop);
      }
  });

  double secs = *std::max_element(seconds.begin(), seconds.end());
  BenchResult res;
  res.device = n == 1 ? devices[0].str() : fmt::format("{}x {}", n, devices[0].is_cpu() ? "cpu" : devices[0].str());
  res.threads = threads;
  res.batch = b * n;
  res.ms_per_step = secs * 1000 / o.steps;
  res.images_per_second = double(b * n) * o.steps / secs;
  res.gflops_per_second = 3.0 * double(g0.flops_per_sample()) * res.images_per_second / 1e9;
  res.allreduce_ms_per_step = reduce[0] * 1000 / o.steps;
  res.hidden_fraction = reduce[0] > 0 ? std::clamp(1.0 - exposed[0] / reduce[0], 0.0, 1.0) : 1.0;

  if (o.layers) {
    std::vector<size_t> order(g0.nodes().size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto& t = g0.layer_times();
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t c) { return t[a].forward + t[a].backward > t[c].forward + t[c].backward; });
    for (size_t i : order)
      res.layer_lines.push_back(fmt::format("{:<36} {:<18} fwd {:8.3f} ms  bwd {:8.3f} ms", g0.nodes()[i].layer->name(),
                                            g0.nodes()[i].layer->type(), t[i].forward * 1000 / o.steps,
                                            t[i].backward * 1000 / o.steps));
  }
  return res;
}

}  // namespace trainer
