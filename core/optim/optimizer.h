// Optimizer: updates the flat trainable-parameter buffer from the flat gradient buffer; one
// instance per replica, its state on the replica's device. Types register by config name.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/io/config.h"
#include "core/ops/optim_update.h"

namespace trainer {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Allocates state buffers for `n` floats on the context's device (zeroed).
  virtual void bind(OpContext& ctx, int64_t n) = 0;
  // One update with learning rate `lr`; gradients are multiplied by grad_scale first.
  virtual void step(Tensor& weights, const Tensor& grads, float lr, float grad_scale) = 0;
  // State buffers by name, for checkpoints ("momentum", "m", "v", ...).
  virtual std::vector<std::pair<std::string, Tensor*>> state() = 0;
  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }
  double base_lr() const { return lr_; }
  void set_base_lr(double lr) { lr_ = lr; }
  virtual std::string describe() const = 0;

 protected:
  double lr_ = 0.01;
  int64_t steps_ = 0;
  std::unique_ptr<OptimUpdateKernel> k_;
};

// `optimizer:` section: {type: sgd|adam|adamw|rmsprop, lr, ...}; unknown keys are config errors.
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(cfg::MapReader&)>;
void register_optimizer(const std::string& type, OptimizerFactory f);
std::unique_ptr<Optimizer> make_optimizer(const cfg::Node& section);

}  // namespace trainer
