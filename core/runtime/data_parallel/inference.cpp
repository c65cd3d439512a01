// InferenceModel through a data-parallel replica: the same graph, kernels and weights a training run has.
#include "core/runtime/inference.h"

#include "core/runtime/data_parallel/replica.h"

namespace trainer {

InferenceModel::InferenceModel(const TraineeSpec& t, Device device, int threads)
    : rep_(std::make_unique<Replica>(t, device, threads)) {}

InferenceModel::~InferenceModel() = default;

ModelState& InferenceModel::state() { return rep_->state(); }

void InferenceModel::logits(const Tensor& inputs, std::vector<float>& host, int64_t first, int64_t count) {
  rep_->logits(inputs, host, first, count);
}

}  // namespace trainer
