// Replica: one device's copy of the model — its context, graph, parameters and optimizer —
// and the training/evaluation step on a batch.
#pragma once
#include <memory>

#include "core/engine/experiment.h"
#include "core/engine/loss.h"
#include "core/engine/model_state.h"
#include "core/graph/graph.h"
#include "core/optim/optimizer.h"

namespace trainer {

// Where a model's loss is computed: the logits node, and whether the output layer (softmax or
// sigmoid) is folded into the loss (Keras' activation + cross-entropy, computed from logits).
struct LossHead {
  int logits = -1;
  bool fused = false;
};
// A config error (at the output layer) when the loss cannot score the model's output.
LossHead loss_head(const Graph& g, const Loss& loss);

// A batch's model inputs as host tensors, one per input: `host` is [N, ...input] for a single
// input (returned as a view), or [N, total] with the inputs' values one after another per sample.
std::vector<Tensor> host_inputs(const Tensor& host, const std::vector<Shape>& shapes);
// One batch's model inputs as device tensors: `host` is [N, ...input] for a single input, or
// [N, total] with the inputs' values one after another per sample; `dev` holds device copies
// (reused between calls), and views of host memory are returned on the CPU.
std::vector<Tensor> split_inputs(OpContext& ctx, const Tensor& host, const std::vector<Shape>& shapes,
                                 std::vector<Tensor>& staging);

class Replica {
 public:
  Replica(const Experiment& e, Device device, int threads);

  // forward, fused softmax cross-entropy, backward and the optimizer update; returns the
  // batch's loss sum and correct count. `grad_scale` is 1 / the global batch.
  LossStats train_step(const Tensor& images, const Tensor& labels, float lr, uint64_t step_seed);
  // `predicted`, when given, receives each sample's arg-max class.
  LossStats eval_step(const Tensor& images, const Tensor& labels, std::vector<int32_t>* predicted = nullptr);
  // Only forward + loss + backward (no update): the gradient is left in params().grads().
  LossStats compute_gradients(const Tensor& images, const Tensor& labels, float grad_scale, uint64_t step_seed);

  OpContext& context() { return *ctx_; }
  ModelState& state() { return *state_; }
  Graph& graph() { return *graph_; }
  Optimizer& optimizer() { return *optimizer_; }
  int logits_node() const { return logits_; }
  bool fused_activation() const { return fused_; }
  const Loss& loss() const { return *loss_; }

 private:
  Tensor to_device(const Tensor& host);

  std::unique_ptr<OpContext> ctx_;
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<StoreState> state_;
  int logits_ = -1;
  bool fused_ = false;  // the output layer (softmax or sigmoid) is fused into the loss
  Tensor dev_labels_;
  std::vector<Tensor> staging_;
};

}  // namespace trainer
