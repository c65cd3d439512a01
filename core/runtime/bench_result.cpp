// The batches `trainer bench` feeds a strategy: synthetic, or the training loader epoch after epoch; the process's CPU clock.
#include "core/runtime/bench_result.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "core/data/dataset.h"

namespace trainer {

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

BenchInput::BenchInput(Loader& loader, int64_t steps_per_epoch) : loader_(&loader) {
  steps_per_epoch_ = loader_->batches_per_epoch();
  if (steps_per_epoch > 0) steps_per_epoch_ = std::min(steps_per_epoch_, steps_per_epoch);
  loader_->start_epoch(0);
}

BenchInput::BenchInput(const Shape& sample, int64_t batch, int classes, uint64_t seed, int rank, int replicas,
                       const Shape& label_shape, int64_t ids) {
  batch_.images = Tensor::empty(sample.with_batch(batch));
  batch_.labels = Tensor::empty(label_shape.with_batch(batch), DType::I32);
  batch_.size = batch;
  batch_.global_size = batch * replicas;
  std::mt19937_64 rng(seed + uint64_t(rank));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < batch_.images.numel(); ++i)
    batch_.images.f32()[i] = ids > 0 ? float(rng() % uint64_t(ids)) : normal(rng);
  for (int64_t i = 0; i < batch_.labels.numel(); ++i) batch_.labels.i32()[i] = int32_t(rng() % uint64_t(classes));
}

const Batch& BenchInput::next(double& waited) {
  if (!loader_) return batch_;
  const auto t0 = std::chrono::steady_clock::now();
  // An epoch ends when the loader runs dry or after train.steps_per_epoch steps, as in training;
  // the next one starts at once (its first batches are then part of the wait).
  if (step_ == steps_per_epoch_ || !loader_->next(batch_)) {
    loader_->start_epoch(++epoch_);
    step_ = 0;
    if (!loader_->next(batch_)) throw DataError("the training loader delivered no batch for a new epoch");
  }
  ++step_;
  waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return batch_;
}

}  // namespace trainer
