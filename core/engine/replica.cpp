// Replica construction and the per-batch steps.
#include "core/engine/replica.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainer {

LossHead loss_head(const Graph& g, const Loss& loss) {
  int out = g.output_node();
  const GraphNode& n = g.nodes()[size_t(out)];
  LossHead h;
  h.fused = n.layer->type() == loss.fused_output() && !is_model_input(n.inputs[0]);
  h.logits = h.fused ? n.inputs[0] : out;
  std::string bad = loss.check_logits(g.nodes()[size_t(h.logits)].shape);
  if (!bad.empty()) n.layer->spec().fail(bad);
  return h;
}

std::vector<Tensor> host_inputs(const Tensor& host, const std::vector<Shape>& shapes) {
  const int64_t n = host.dim(0);
  if (shapes.size() == 1) return {host.reshape(shapes[0].with_batch(n))};
  // Several inputs: sample i holds input 0's values, then input 1's, ...: gather each input's rows.
  int64_t total = 0;
  for (const Shape& s : shapes) total += s.numel();
  if (host.numel() != n * total) throw std::invalid_argument("the batch does not hold the model's inputs");
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (const Shape& s : shapes) {
    const int64_t m = s.numel();
    Tensor h = Tensor::empty(s.with_batch(n));
    for (int64_t i = 0; i < n; ++i)
      std::copy(host.f32() + i * total + offset, host.f32() + i * total + offset + m, h.f32() + i * m);
    offset += m;
    out.push_back(h);
  }
  return out;
}

std::vector<Tensor> split_inputs(OpContext& ctx, const Tensor& host, const std::vector<Shape>& shapes,
                                 std::vector<Tensor>& staging) {
  std::vector<Tensor> out = host_inputs(host, shapes);
  if (ctx.device().is_cpu()) return out;
  staging.resize(out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    if (staging[k].shape() != out[k].shape()) staging[k] = ctx.empty(out[k].shape());
    ctx.copy_from_host(staging[k].data(), out[k].data(), out[k].bytes());
    out[k] = staging[k];
  }
  return out;
}

Replica::Replica(const Experiment& e, Device device, int threads) {
  ctx_ = make_context(device, context_options(e, threads));
  graph_ = std::make_unique<Graph>(e.model);
  graph_->bind(*ctx_, e.seed);
  optimizer_ = make_optimizer(e.optimizer);
  optimizer_->bind(*ctx_, graph_->params().trainable_weights(), graph_->params().trainable_grads());
  loss_ = make_loss(e.train.loss, *ctx_);
  // Keras' softmax (sigmoid) + crossentropy: the loss is computed from the activation's input
  // (logits), which is exact and stable; otherwise the output is taken as logits (from_logits=True).
  LossHead h = loss_head(*graph_, *loss_);
  fused_ = h.fused;
  logits_ = h.logits;
  graph_->keep_f32(logits_);  // the loss reads and writes f32
  state_ = std::make_unique<StoreState>(*ctx_, graph_->params(), *optimizer_);
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
  std::vector<Tensor> x = split_inputs(*ctx_, images, graph_->input_shapes(), staging_);
  Tensor y = to_device(labels);
  graph_->set_step_seed(step_seed);
  graph_->forward(pointers(x), true, logits_);
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
  std::vector<Tensor> x = split_inputs(*ctx_, images, graph_->input_shapes(), staging_);
  Tensor y = to_device(labels);
  graph_->forward(pointers(x), false, logits_);
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
