// Optimizer update op family: fused in-place updates over the flat parameter buffer, and the finiteness check of the gradients (loss scaling).
#pragma once
#include "core/ops/registry.h"

namespace trainer {

// Per-step scalars; grad_scale multiplies every gradient first (folds replica averaging in).
struct SgdStep {
  float lr, momentum, weight_decay, grad_scale;
  bool nesterov;
};
struct AdamStep {
  float lr, beta1, beta2, epsilon, weight_decay, grad_scale;
  bool decoupled;  // AdamW: w -= lr * wd * w, instead of adding wd * w to the gradient
  float bias1, bias2;  // 1 - beta1^t, 1 - beta2^t
};
struct RmspropStep {
  float lr, rho, momentum, epsilon, weight_decay, grad_scale;
  bool centered;
};

struct OptimUpdateParams {};

class OptimUpdateKernel {
 public:
  using Params = OptimUpdateParams;
  static constexpr const char* kName = "optim_update";
  virtual ~OptimUpdateKernel() = default;
  // w, g, and the state buffers are flat f32 tensors of equal length.
  // SGD (PyTorch/Keras form): v = momentum*v + g'; w -= lr * (nesterov ? g' + momentum*v : v),
  // where g' = g*scale + wd*w.
  virtual void sgd(Tensor& w, const Tensor& g, Tensor& velocity, const SgdStep& s) = 0;
  // Adam(W): m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; w -= lr * (m/bias1) / (sqrt(v/bias2) + eps)
  virtual void adam(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) = 0;
  // RMSprop (Keras): ms = rho ms + (1-rho) g'^2 [mg = rho mg + (1-rho) g' when centered];
  // denom = sqrt(ms - mg^2) + eps; with momentum: mom = momentum*mom + lr g'/denom, w -= mom;
  // without: w -= lr g'/denom.
  virtual void rmsprop(Tensor& w, const Tensor& g, Tensor& ms, Tensor& mom, Tensor& mg, const RmspropStep& s) = 0;
  // Whether every element of the flat f32 tensor g is finite (no inf, no NaN); waits for the
  // device. A logical AND: the same answer whatever the order, on every backend.
  virtual bool all_finite(const Tensor& g) = 0;
};

}  // namespace trainer
