// The moving average's update through the element-wise kernels of the copy's device (no kernel of its own).
#include "core/optim/weight_average.h"

#include <stdexcept>

#include "core/ops/registry.h"

namespace trainer {

WeightAverage::WeightAverage(OpContext& ctx, Tensor weights, const WeightAverageOptions& o)
    : ctx_(ctx), w_(std::move(weights)), decay_(float(o.decay)), every_(o.every > 0 ? o.every : 1) {
  avg_ = ctx_.zeros(w_.shape());
  scratch_ = ctx_.zeros(w_.shape());
  ew_ = make_kernel<ElementwiseKernel>(ctx_, ElementwiseParams{});
}

void WeightAverage::start() {
  if (started_) return;
  if (w_.numel() > 0) ew_->convert(w_, avg_);
  started_ = true;
}

void WeightAverage::update(int64_t optimizer_steps) {
  if (!started_) start();
  if (optimizer_steps == last_steps_) return;
  last_steps_ = optimizer_steps;
  if (optimizer_steps % every_ != 0 || w_.numel() == 0) return;
  // avg = decay·avg + (1 − decay)·w, each product rounded to fp32, then their sum.
  ew_->scale(avg_, decay_);
  ew_->convert(w_, scratch_);
  ew_->scale(scratch_, float(1.0 - double(decay_)));
  ew_->accumulate(scratch_, avg_);
}

std::vector<float> WeightAverage::download() {
  if (!started_) start();
  std::vector<float> host(size_t(avg_.numel()));
  if (!host.empty()) ctx_.copy_to_host(host.data(), avg_.data(), host.size() * sizeof(float));
  return host;
}

void WeightAverage::upload(const std::vector<float>& values) {
  if (int64_t(values.size()) != avg_.numel()) throw std::logic_error("WeightAverage::upload: wrong size");
  if (!values.empty()) ctx_.copy_from_host(avg_.data(), values.data(), values.size() * sizeof(float));
  started_ = true;
}

}  // namespace trainer
