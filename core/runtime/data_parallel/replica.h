// Replica: one device's copy of the model — its context, graph, parameters and optimizer —
// and the training/evaluation step on a batch.
#pragma once
#include <memory>

#include "core/runtime/batch_inputs.h"
#include "core/runtime/trainee.h"
#include "core/graph/loss.h"
#include "core/checkpoint/model_state.h"
#include "core/graph/executor.h"
#include "core/optim/optimizer.h"

namespace trainer {

class Replica {
 public:
  Replica(const TraineeSpec& t, Device device, int threads);

  // forward, fused softmax cross-entropy, backward and the optimizer update; returns the
  // batch's loss sum and correct count. `grad_scale` is 1 / the global batch.
  LossStats train_step(const Tensor& images, const Tensor& labels, float lr, uint64_t step_seed);
  // `predicted`, when given, receives each sample's arg-max class.
  LossStats eval_step(const Tensor& images, const Tensor& labels, std::vector<int32_t>* predicted = nullptr);
  // Only forward + loss + backward (no update): the gradient is left in params().grads().
  LossStats compute_gradients(const Tensor& images, const Tensor& labels, float grad_scale, uint64_t step_seed);

  OpContext& context() { return *ctx_; }
  ModelState& state() { return *state_; }
  Executor& executor() { return *exec_; }
  Optimizer& optimizer() { return *optimizer_; }
  int logits_node() const { return logits_; }
  bool fused_activation() const { return fused_; }
  const Loss& loss() const { return *loss_; }

 private:
  Tensor to_device(const Tensor& host);

  std::unique_ptr<OpContext> ctx_;
  std::unique_ptr<Executor> exec_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<StoreState> state_;
  int logits_ = -1;
  bool fused_ = false;  // the output layer (softmax or sigmoid) is fused into the loss
  Tensor dev_labels_;
  BatchInputs inputs_;
};

}  // namespace trainer
