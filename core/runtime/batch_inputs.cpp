// Splitting a batch's samples into the model's inputs.
#include "core/runtime/batch_inputs.h"

#include <algorithm>
#include <stdexcept>

namespace trainer {

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

}  // namespace trainer
