// The moving average's update: the optimizer kernels' one-pass average on the copy's device, read from a fixed step's memory inside a recorded program.
#include "core/optim/weight_average.h"

#include <stdexcept>

#include "core/ops/registry.h"

namespace trainer {

WeightAverage::WeightAverage(OpContext& ctx, Tensor weights, const WeightAverageOptions& o)
    : ctx_(ctx), w_(std::move(weights)), decay_(float(o.decay)), every_(o.every > 0 ? o.every : 1) {
  avg_ = ctx_.zeros(w_.shape());
  ew_ = make_kernel<ElementwiseKernel>(ctx_, ElementwiseParams{});
  avg_k_ = make_kernel<OptimUpdateKernel>(ctx_, OptimUpdateParams{});
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
  if (!averages_at(optimizer_steps)) return;
  // avg = decay·avg + (1 − decay)·w, each product rounded to fp32, then their sum.
  avg_k_->average(avg_, w_, decay_, nullptr);
}

void WeightAverage::update_in_step(const StepScalars* step) {
  if (!started_) throw std::logic_error("WeightAverage::update_in_step before start()");
  avg_k_->average(avg_, w_, decay_, step);
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
