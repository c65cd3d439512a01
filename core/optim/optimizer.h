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
  // Binds the flat trainable weights and their gradients (equal lengths, on ctx's device) and
  // allocates the state buffers (zeroed).
  void bind(OpContext& ctx, Tensor weights, Tensor grads);
  // One optimisation step is begin_step() and then update() over every element once, in as
  // many ranges as convenient (data parallelism updates each gradient bucket as soon as its
  // all-reduce is done). Gradients are multiplied by grad_scale first.
  void begin_step() { ++steps_; }
  virtual void update(int64_t begin, int64_t end, float lr, float grad_scale) = 0;
  void step(float lr, float grad_scale) {
    begin_step();
    update(0, weights_.numel(), lr, grad_scale);
  }
  // Whether every gradient is finite (loss scaling's check; waits for the device).
  bool grads_finite() { return k_->all_finite(grads_); }
  // State buffers by name, for checkpoints ("momentum", "m", "v", ...).
  virtual std::vector<std::pair<std::string, Tensor*>> state() = 0;
  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }
  double base_lr() const { return lr_; }
  void set_base_lr(double lr) { lr_ = lr; }
  virtual std::string describe() const = 0;

 protected:
  virtual void allocate_state(OpContext& ctx, int64_t n) = 0;
  // The [begin, end) range of a flat buffer (undefined stays undefined).
  static Tensor range(const Tensor& t, int64_t begin, int64_t end) { return t.defined() ? t.slice(begin, end) : t; }
  Tensor weights_, grads_;
  double lr_ = 0.01;
  int64_t steps_ = 0;
  std::unique_ptr<OptimUpdateKernel> k_;
};

// `optimizer:` section: {type: sgd|adam|adamw|rmsprop, lr, ...}; unknown keys are config errors.
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(cfg::MapReader&)>;
void register_optimizer(const std::string& type, OptimizerFactory f);
std::unique_ptr<Optimizer> make_optimizer(const cfg::Node& section);

}  // namespace trainer
