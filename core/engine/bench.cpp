// Timed training steps on a fixed random batch.
#include "core/engine/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "core/engine/devices.h"
#include "core/engine/replica.h"

namespace trainer {

BenchResult bench(const Experiment& e, const BenchOptions& o) {
  std::vector<Device> devices = select_devices(e.devices);
  Replica rep(e, devices[0], e.devices.threads);
  Graph& g = rep.graph();
  int64_t n = e.train.batch_size;
  int classes = int(g.nodes()[size_t(rep.logits_node())].shape[0]);
  Tensor x = Tensor::empty(e.model.input.with_batch(n)), y = Tensor::empty(Shape{n}, DType::I32);
  std::mt19937_64 rng(e.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = normal(rng);
  for (int64_t i = 0; i < n; ++i) y.i32()[i] = int32_t(rng() % uint64_t(classes));
  float lr = float(rep.optimizer().base_lr());

  for (int s = 0; s < o.warmup; ++s) rep.train_step(x, y, lr, uint64_t(s));
  rep.context().synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < o.steps; ++s) rep.train_step(x, y, lr, uint64_t(o.warmup + s));
  rep.context().synchronize();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  BenchResult r;
  r.device = devices[0].str();
  r.threads = e.devices.threads > 0 ? e.devices.threads : int(std::thread::hardware_concurrency());
  r.batch = n;
  r.ms_per_step = secs * 1000 / o.steps;
  r.images_per_second = double(n) * o.steps / secs;
  r.gflops_per_second = 3.0 * double(g.flops_per_sample()) * r.images_per_second / 1e9;

  if (o.layers) {
    g.set_profiling(true);
    for (int s = 0; s < o.steps; ++s) rep.train_step(x, y, lr, uint64_t(s));
    g.set_profiling(false);
    std::vector<size_t> order(g.nodes().size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto& t = g.layer_times();
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return t[a].forward + t[a].backward > t[b].forward + t[b].backward; });
    for (size_t i : order)
      r.layer_lines.push_back(fmt::format("{:<36} {:<18} fwd {:8.3f} ms  bwd {:8.3f} ms", g.nodes()[i].layer->name(),
                                          g.nodes()[i].layer->type(), t[i].forward * 1000 / o.steps,
                                          t[i].backward * 1000 / o.steps));
  }
  return r;
}

}  // namespace trainer
