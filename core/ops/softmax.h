// Softmax op family: softmax over the last axis, and fused softmax cross-entropy with accuracy.
#pragma once
#include "core/ops/registry.h"

namespace trainer {

struct LossStats {
  double loss_sum = 0;  // sum over samples of the per-sample loss
  int64_t correct = 0;  // samples whose argmax equals the label
  int64_t count = 0;
  LossStats& operator+=(const LossStats& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    count += o.count;
    return *this;
  }
};

struct SoftmaxParams {};

class SoftmaxKernel {
 public:
  using Params = SoftmaxParams;
  static constexpr const char* kName = "softmax";
  virtual ~SoftmaxKernel() = default;
  // y = softmax(x) over the last axis
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  // dx = y * (dy - sum(dy * y)) over the last axis
  virtual void backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  // Cross-entropy of softmax(logits) [N,C] against labels: i32 class indices [N] or f32
  // probabilities (one-hot) [N,C]. Writes dlogits = (softmax - target) * grad_scale when
  // dlogits is defined (grad_scale is 1/global batch for a mean loss).
  virtual LossStats cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, float grad_scale) = 0;
};

}  // namespace trainer
