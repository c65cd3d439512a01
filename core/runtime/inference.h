// InferenceModel: one copy of the model on one device for inference (trainer predict): a
// checkpoint loaded into it, the forward pass to the loss's logits.
#pragma once
#include <memory>
#include <vector>

#include "core/runtime/trainee.h"

namespace trainer {

class Replica;

class InferenceModel {
 public:
  InferenceModel(const TraineeSpec& t, Device device, int threads);
  ~InferenceModel();
  ModelState& state();
  // The logits of a batch of model inputs (host [N, ...]): N x units values, row-major (or `count`
  // of them from the `first`).
  void logits(const Tensor& inputs, std::vector<float>& host, int64_t first = 0, int64_t count = -1);

 private:
  std::unique_ptr<Replica> rep_;
};

}  // namespace trainer
