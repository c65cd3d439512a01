// `trainer bench` for a device-parallel model: timed GPipe steps on a fixed random batch, with
// the stages' idle (bubble) fraction.
#include <fmt/format.h>

#include <chrono>
#include <random>

#include "core/engine/bench.h"
#include "core/engine/devices.h"
#include "core/engine/pipeline/pipeline_worker.h"
#include "core/engine/replica.h"

namespace trainer {

BenchResult bench_pipeline(const Experiment& e, const BenchOptions& o) {
  std::vector<Device> devices = placement_devices(e.placement, e.devices, nullptr);
  int cpu_devices = 0;
  for (const Device& d : devices) cpu_devices += d.is_cpu();
  const int threads = threads_per_replica(e.devices, std::max(1, cpu_devices));
  PipelineWorker w(e, devices, threads);
  Graph full(e.model);
  const int64_t b = e.train.batch_size;
  auto cpu = make_context(Device::cpu(0));
  auto loss = make_loss(e.train.loss, *cpu);
  const int classes = int(std::max<int64_t>(2, full.nodes()[size_t(loss_head(full, *loss).logits)].shape[0]));
  const float lr = float(make_optimizer(e.optimizer)->base_lr());

  Batch batch;
  batch.images = Tensor::empty(e.model.input.with_batch(b));
  batch.labels = Tensor::empty(Shape{b}, DType::I32);
  batch.size = batch.global_size = b;
  std::mt19937_64 rng(e.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < batch.images.numel(); ++i) batch.images.f32()[i] = normal(rng);
  for (int64_t i = 0; i < b; ++i) batch.labels.i32()[i] = int32_t(rng() % uint64_t(classes));
  bool stop = false;
  for (int s = 0; s < o.warmup; ++s) w.train_step(batch, lr, uint64_t(s), stop);
  w.reset_bubble();
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < o.steps; ++s) w.train_step(batch, lr, uint64_t(o.warmup + s), stop);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  BenchResult res;
  std::string where;
  for (size_t d = 0; d < devices.size(); ++d) where += (d ? "+" : "") + e.placement.devices[d];
  res.device = fmt::format("device parallel {}", where);
  res.threads = threads;
  res.batch = b;
  res.ms_per_step = secs * 1000 / o.steps;
  res.images_per_second = double(b) * o.steps / secs;
  res.gflops_per_second = 3.0 * double(full.flops_per_sample()) * res.images_per_second / 1e9;
  res.allreduce_ms_per_step = 0;
  res.microbatches = w.microbatches();
  res.bubble = w.bubble().fraction();
  return res;
}

}  // namespace trainer
