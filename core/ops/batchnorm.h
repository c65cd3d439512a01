// BatchNorm op family: per-channel (last axis) normalisation with batch or running statistics.
#pragma once
#include "core/ops/registry.h"

namespace trainer {

struct BatchNormParams {
  float momentum = 0.99f;  // Keras: running = momentum * running + (1 - momentum) * batch
  float epsilon = 1e-3f;
};

class BatchNormKernel {
 public:
  using Params = BatchNormParams;
  static constexpr const char* kName = "batchnorm";
  virtual ~BatchNormKernel() = default;
  // x [..., C] normalised over every axis but the last with the batch statistics.
  // Saves the batch mean and 1/sqrt(var + eps) ([C]) for backward and updates the running
  // statistics (the running variance takes the unbiased batch variance, as TF's fused kernel,
  // cuDNN and PyTorch do).
  virtual void forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean,
                             Tensor& running_var) = 0;
  virtual void forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& running_mean, const Tensor& running_var, Tensor& y) = 0;
  // dx, dgamma, dbeta overwritten; dx may be undefined.
  virtual void backward(const Tensor& x, const Tensor& gamma, const Tensor& dy, const Tensor& save_mean,
                        const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) = 0;
};

}  // namespace trainer
