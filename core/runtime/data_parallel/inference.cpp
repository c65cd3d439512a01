// InferenceModel through a data-parallel replica: the same graph, kernels and weights a training run has.
#include "core/runtime/inference.h"

#include "core/runtime/data_parallel/replica.h"

namespace trainer {

namespace {

// The trainee as inference needs it: the checkpoint's weights (trained or averaged) are loaded
// into the model itself, so plain SGD's one velocity stands for the run's optimizer (Adam's slots
// are two copies of the weights) and no moving average is made. A GPT-2 124M generate of one
// token on 2 CPU cores (2026-11-29, 4 alternating runs each, medians): peak memory 4,528 -> 4,056
// MiB, wall 14.0 -> 11.5 s; most of the rest is
// the checkpoint's bytes, its optimizer state included, which CheckpointInfo holds so that a file
// pruned by a live run stays readable.
TraineeSpec for_inference(TraineeSpec t) {
  t.optimizer = OptimizerSpec{};  // plain SGD: one slot
  t.average = WeightAverageOptions{};
  return t;
}

}  // namespace

InferenceModel::InferenceModel(const TraineeSpec& t, Device device, int threads)
    : rep_(std::make_unique<Replica>(for_inference(t), device, threads)) {}

InferenceModel::~InferenceModel() = default;

ModelState& InferenceModel::state() { return rep_->state(); }

void InferenceModel::logits(const Tensor& inputs, std::vector<float>& host, int64_t first, int64_t count) {
  rep_->logits(inputs, host, first, count);
}

}  // namespace trainer
