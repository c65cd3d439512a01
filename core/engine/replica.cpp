// Replica construction and the per-batch steps.
#include "core/engine/replica.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainer {

Replica::Replica(const Experiment& e, Device device, int threads) {
  ContextOptions o;
  o.threads = threads;
  ctx_ = make_context(device, o);
  graph_ = std::make_unique<Graph>(e.model);
  graph_->bind(*ctx_, e.seed);
  optimizer_ = make_optimizer(e.optimizer);
  optimizer_->bind(*ctx_, graph_->params().trainable_weights(), graph_->params().trainable_grads());
  loss_ = make_loss(e.train.loss, *ctx_);
  int out = graph_->output_node();
  const GraphNode& n = graph_->nodes()[size_t(out)];
  // Keras' softmax (sigmoid) + crossentropy: the loss is computed from the activation's input
  // (logits), which is exact and stable; otherwise the output is taken as logits (from_logits=True).
  fused_ = n.layer->type() == loss_->fused_output() && n.inputs[0] >= 0;
  logits_ = fused_ ? n.inputs[0] : out;
  std::string bad = loss_->check_logits(graph_->nodes()[size_t(logits_)].shape);
  if (!bad.empty()) n.layer->spec().fail(bad);
}

Tensor Replica::to_device(const Tensor& host) {
  if (ctx_->device().is_cpu()) return host;
  Tensor& dst = host.dtype() == DType::I32 ? dev_labels_ : dev_images_;
  if (dst.shape() != host.shape() || dst.dtype() != host.dtype()) dst = ctx_->empty(host.shape(), host.dtype());
  ctx_->copy_from_host(dst.data(), host.data(), host.bytes());
  return dst;
}

LossStats Replica::compute_gradients(const Tensor& images, const Tensor& labels, float grad_scale, uint64_t step_seed) {
  Tensor x = to_device(images), y = to_device(labels);
  graph_->set_step_seed(step_seed);
  graph_->forward(x, true, logits_);
  Tensor& dlogits = graph_->grad(logits_);
  LossStats s = loss_->compute(graph_->output(logits_), y, dlogits, grad_scale);
  graph_->backward(dlogits, logits_);
  return s;
}

LossStats Replica::train_step(const Tensor& images, const Tensor& labels, float lr, uint64_t step_seed) {
  LossStats s = compute_gradients(images, labels, 1.0f / float(images.dim(0)), step_seed);
  optimizer_->step(lr, 1.0f);
  return s;
}

LossStats Replica::eval_step(const Tensor& images, const Tensor& labels, std::vector<int32_t>* predicted) {
  Tensor x = to_device(images), y = to_device(labels);
  graph_->forward(x, false, logits_);
  Tensor none;
  LossStats s = loss_->compute(graph_->output(logits_), y, none, 1.0f);
  if (predicted) {
    const Tensor& logits = graph_->output(logits_);
    int64_t n = logits.dim(0), k = logits.numel() / std::max<int64_t>(n, 1);
    std::vector<float> host(size_t(logits.numel()));
    ctx_->copy_to_host(host.data(), logits.data(), host.size() * sizeof(float));
    predicted->assign(size_t(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = host.data() + i * k;
      // The first maximum, as argmax; one output unit is a binary classifier (logit > 0).
      (*predicted)[size_t(i)] = k == 1 ? int32_t(row[0] > 0) : int32_t(std::max_element(row, row + k) - row);
    }
  }
  return s;
}

}  // namespace trainer
