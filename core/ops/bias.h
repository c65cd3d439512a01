// Bias op family: a per-channel bias added to the last axis of an activation, and its gradient (the column sums of dy).
#pragma once
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct BiasParams {};

// For layers whose main op has no bias of its own on the output's channels (conv2d_transpose,
// whose convolution runs backwards). y and dy: [..., C] of a float type (f32, or the context's
// low type); b and db: [C] f32.
class BiasKernel {
 public:
  using Params = BiasParams;
  static constexpr const char* kName = "bias_add";
  virtual ~BiasKernel() = default;
  BiasKernel(const BiasKernel&) = delete;
  BiasKernel& operator=(const BiasKernel&) = delete;

  // y[..., c] += b[c], in f32, rounded once to y's type.
  void forward(Tensor& y, const Tensor& b) {
    ck_.floating("y", y);
    ck_.min_rank("y", y, 1);
    ck_.shape("b", b, {y.shape().back()});
    forward_impl(y, b);
  }
  // db[c] = the sum of dy[..., c] over every other axis, in double, rounded once to f32 (the same
  // bits at any thread count; 0 for an empty dy).
  void backward(const Tensor& dy, Tensor& db) {
    ck_.floating("dy", dy);
    ck_.min_rank("dy", dy, 1);
    ck_.shape("db", db, {dy.shape().back()});
    backward_impl(dy, db);
  }

 protected:
  BiasKernel(const OpContext& c, const Params&) : ck_(kName, c.device()) {}
  // Called with checked arguments only.
  virtual void forward_impl(Tensor& y, const Tensor& b) = 0;
  virtual void backward_impl(const Tensor& dy, Tensor& db) = 0;

 private:
  shape_checks::Checks ck_;
};

}  // namespace trainer
