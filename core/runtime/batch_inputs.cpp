// Splitting a batch's samples into the model's inputs.
#include "core/runtime/batch_inputs.h"

#include <algorithm>
#include <stdexcept>

namespace trainer {

const std::vector<Tensor>& BatchInputs::on_host(const Tensor& host, const std::vector<Shape>& shapes) {
  const int64_t n = host.dim(0);
  host_.resize(shapes.size());
  if (shapes.size() == 1) {
    host_[0] = host.reshape(shapes[0].with_batch(n));
    return host_;
  }
  // Several inputs: sample i holds input 0's values, then input 1's, ...: gather each input's rows.
  int64_t total = 0;
  for (const Shape& s : shapes) total += s.numel();
  if (host.numel() != n * total) throw std::invalid_argument("the batch does not hold the model's inputs");
  gathered_.resize(shapes.size());
  int64_t offset = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const int64_t m = shapes[k].numel();
    const Shape want = shapes[k].with_batch(n);
    if (gathered_[k].shape() != want) gathered_[k] = Tensor::empty(want);
    Tensor& h = gathered_[k];
    for (int64_t i = 0; i < n; ++i)
      std::copy(host.f32() + i * total + offset, host.f32() + i * total + offset + m, h.f32() + i * m);
    offset += m;
    host_[k] = h;
  }
  return host_;
}

const std::vector<Tensor>& BatchInputs::on(OpContext& ctx, const Tensor& host, const std::vector<Shape>& shapes) {
  const std::vector<Tensor>& in = on_host(host, shapes);
  if (ctx.device().is_cpu()) return in;
  device_.resize(in.size());
  out_.resize(in.size());
  for (size_t k = 0; k < in.size(); ++k) {
    if (device_[k].shape() != in[k].shape()) device_[k] = ctx.empty(in[k].shape());
    ctx.copy_from_host(device_[k].data(), in[k].data(), in[k].bytes());
    out_[k] = device_[k];
  }
  return out_;
}

}  // namespace trainer
