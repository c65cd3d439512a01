// BatchNorm op family: per-channel (last axis) normalisation with batch or running statistics.
#pragma once
#include "core/ops/activation.h"
#include "core/ops/registry.h"

namespace trainer {

struct BatchNormParams {
  float momentum = 0.99f;  // Keras: running = momentum * running + (1 - momentum) * batch
  float epsilon = 1e-3f;
  // An activation applied to the output in the same pass (Linear: none): y = act(bn(x)), and
  // backward takes dy through it first, reading y. Only kinds the kernel can_fuse(); the graph
  // fuses a ReLU (ReLU6) that runs in place after batch norm (Graph, Layer::fuse_activation).
  ActKind activation = ActKind::Linear;
};

class BatchNormKernel {
 public:
  using Params = BatchNormParams;
  static constexpr const char* kName = "batchnorm";
  virtual ~BatchNormKernel() = default;
  // Whether this backend applies `k` as Params::activation (Linear always).
  virtual bool can_fuse(ActKind k) const { return k == ActKind::Linear; }
  // x [..., C] normalised over every axis but the last with the batch statistics.
  // Saves the batch mean and 1/sqrt(var + eps) ([C]) for backward and updates the running
  // statistics (the running variance takes the unbiased batch variance, as TF's fused kernel,
  // cuDNN and PyTorch do).
  virtual void forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean,
                             Tensor& running_var) = 0;
  virtual void forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& running_mean, const Tensor& running_var, Tensor& y) = 0;
  // dx, dgamma, dbeta overwritten; dx may be undefined. y (forward's output) is read only with a
  // fused activation, and may be undefined without one.
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& gamma, const Tensor& dy,
                        const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta) = 0;

  // --- Pieces of synchronised batch norm (statistics over several replicas' batches), without a
  // fused activation. The layer reduces the [C] results across replicas between the calls; normalisation itself is
  // forward_infer with the global mean and variance. All [C] tensors are f32 on this device,
  // accumulated in double (CPU) or in fixed-order reductions (CUDA).
  // sum[c] = sum over rows of (x - shift[c]), sumsq[c] = sum of (x - shift[c])^2; an undefined
  // shift means 0. (Two passes — the mean, then the centred square sum — keep the variance exact.)
  virtual void channel_sums(const Tensor& x, const Tensor& shift, Tensor& sum, Tensor& sumsq) = 0;
  // sum_dy[c] = sum of dy, sum_dy_xmu[c] = sum of dy * (x - mean[c]), over this replica's rows.
  virtual void backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, Tensor& sum_dy,
                             Tensor& sum_dy_xmu) = 0;
  // dx = g * invstd * (dy - sum_dy / count - (x - mean) * invstd^2 * sum_dy_xmu / count), with the
  // sums and count over the whole (global) batch; g = gamma, or 1 when undefined.
  virtual void backward_apply(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                              const Tensor& invstd, const Tensor& sum_dy, const Tensor& sum_dy_xmu, double count,
                              Tensor& dx) = 0;
};

}  // namespace trainer
