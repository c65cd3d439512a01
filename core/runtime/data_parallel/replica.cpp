// Replica construction and the per-batch steps.
#include "core/runtime/data_parallel/replica.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainer {

Replica::Replica(const TraineeSpec& t, Device device, int threads) {
  ctx_ = make_context(device, t.context_for(threads));
  exec_ = std::make_unique<Executor>(t.graph ? t.graph : t.make_graph(), *ctx_, t.seed);
  optimizer_ = make_optimizer(t.optimizer);
  bind_optimizer(*optimizer_, *ctx_, exec_->params());
  loss_ = make_loss(t.loss, *ctx_, t.loss_options);
  ignore_class_ = t.loss_options.ignore_class;
  // Keras' softmax (sigmoid) + crossentropy: the loss is computed from the activation's input
  // (logits), which is exact and stable; otherwise the output is taken as logits (from_logits=True).
  LossHead h = loss_head(exec_->graph(), *loss_);
  fused_ = h.fused;
  logits_ = h.logits;
  exec_->keep_f32(logits_);  // the loss reads and writes f32
  exec_->set_last(logits_);  // the output softmax is the loss's: its node gets no buffers
  if (t.average.enabled()) average_ = std::make_unique<WeightAverage>(*ctx_, exec_->params().weights(), t.average);
  state_ = std::make_unique<StoreState>(*ctx_, exec_->params(), *optimizer_, average_.get());
}

Tensor Replica::to_device(const Tensor& host) {
  if (ctx_->device().is_cpu()) return host;
  if (dev_labels_.shape() != host.shape() || dev_labels_.dtype() != host.dtype()) dev_labels_ = ctx_->empty(host.shape(), host.dtype());
  ctx_->copy_from_host(dev_labels_.data(), host.data(), host.bytes());
  return dev_labels_;
}

static std::vector<const Tensor*> pointers(const std::vector<Tensor>& v) {
  std::vector<const Tensor*> p;
  for (const Tensor& t : v) p.push_back(&t);
  return p;
}

LossStats Replica::compute_gradients(const Tensor& images, const Tensor& labels, float grad_scale, uint64_t step_seed) {
  const std::vector<Tensor>& x = inputs_.on(*ctx_, images, exec_->input_shapes());
  Tensor y = to_device(labels);
  exec_->set_step_seed(step_seed);
  exec_->forward(pointers(x), true, logits_);
  Tensor& dlogits = exec_->grad(logits_);
  LossStats s = loss_->compute(exec_->output(logits_), y, dlogits, grad_scale);
  exec_->backward(dlogits, logits_);
  return s;
}

LossStats Replica::train_step(const Tensor& images, const Tensor& labels, float lr, uint64_t step_seed) {
  int64_t scored = labels.numel();
  if (ignore_class_) scored -= std::count(labels.i32(), labels.i32() + labels.numel(), *ignore_class_);
  LossStats s = compute_gradients(images, labels, scored > 0 ? 1.0f / float(scored) : 0.0f, step_seed);
  optimizer_->step(lr, 1.0f);
  return s;
}

void Replica::logits(const Tensor& images, std::vector<float>& host, int64_t first, int64_t count) {
  const std::vector<Tensor>& x = inputs_.on(*ctx_, images, exec_->input_shapes());
  exec_->forward(pointers(x), false, logits_);
  const Tensor& out = exec_->output(logits_);
  if (count < 0) count = out.numel() - first;
  if (first < 0 || first + count > out.numel())
    throw std::out_of_range(fmt::format("Replica::logits: values [{}, {}) of {}", first, first + count, out.numel()));
  host.resize(size_t(count));
  ctx_->copy_to_host(host.data(), out.f32() + first, host.size() * sizeof(float));
}

LossStats Replica::eval_step(const Tensor& images, const Tensor& labels, std::vector<int32_t>* predicted) {
  const std::vector<Tensor>& x = inputs_.on(*ctx_, images, exec_->input_shapes());
  Tensor y = to_device(labels);
  exec_->forward(pointers(x), false, logits_);
  Tensor none;
  LossStats s = loss_->compute(exec_->output(logits_), y, none, 1.0f);
  if (predicted) {
    const Tensor& logits = exec_->output(logits_);
    // One prediction per row of scores: per sample, or per position of logits [N, T, classes].
    const int64_t k = logits.shape().rank() == 3 ? logits.dim(2) : logits.numel() / std::max<int64_t>(logits.dim(0), 1);
    const int64_t n = k ? logits.numel() / k : 0;
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
