// Dense op family: fully connected layer, x [N,K] * w [K,U] + b [U] (Keras kernel layout).
#pragma once
#include "core/ops/registry.h"

namespace trainer {

struct DenseParams {
  int64_t units = 0;
  bool bias = true;
};

class DenseKernel {
 public:
  using Params = DenseParams;
  static constexpr const char* kName = "dense";
  virtual ~DenseKernel() = default;
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  // dw, db overwritten; dx (overwritten) may be undefined.
  virtual void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) = 0;
};

}  // namespace trainer
