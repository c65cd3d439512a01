// Optimizer: updates the flat trainable-parameter buffer from the flat gradient buffer; one
// instance per replica, its state on the replica's device. Types register by config name.
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/io/config.h"
#include "core/ops/optim_update.h"
#include "core/ops/step_scalars.h"

namespace trainer {

// A trainable parameter's name and its elements [begin, end) in the flat buffers.
struct NamedSpan {
  std::string name;
  int64_t begin = 0, end = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Binds the flat trainable weights and their gradients (equal lengths, on ctx's device) and
  // allocates the state buffers (zeroed).
  void bind(OpContext& ctx, Tensor weights, Tensor grads);
  // optimizer.exclude_from_weight_decay (Keras's exclude_from_weight_decay(var_names=...)): the
  // parameters whose names contain a match of one of the patterns (ECMAScript regular expressions,
  // searched as Keras's re.search) get no weight decay, decoupled or L2 — e.g. [bias, gamma, beta]
  // for llm.c's and nanoGPT's "decay the matrices only". After bind, with the trainable
  // parameters of the flat buffers; the patterns come from the spec (make_optimizer).
  void exclude_from_decay(const std::vector<NamedSpan>& params);
  // One optimisation step is begin_step() and then update() over every element once, in as
  // many ranges as convenient (data parallelism updates each gradient bucket as soon as its
  // all-reduce is done). Gradients are multiplied by grad_scale first.
  void begin_step() { ++steps_; }
  virtual void update(int64_t begin, int64_t end, float lr, float grad_scale) = 0;
  // The same in a recorded step (CUDA graphs): the rate, the gradient scale and Adam's bias
  // corrections are read from `step` where the update runs; step_scalars() fills them for this
  // step (after begin_step) — the same values update() would use, so the same bits.
  virtual void update_from(int64_t begin, int64_t end, const StepScalars* step) = 0;
  virtual void step_scalars(StepScalars& s, float lr, float grad_scale) const {
    s.lr = lr;
    s.grad_scale = grad_scale;
  }
  void step(float lr, float grad_scale) {
    begin_step();
    update(0, weights_.numel(), lr, grad_scale);
  }
  // Whether every gradient is finite (loss scaling's check; waits for the device).
  bool grads_finite() { return k_->all_finite(grads_); }
  // Gradient clipping (grad_clip.h): the sum of squares of the gradients [begin, end) (all by
  // default; waits for the device), and g = clamp(g·scale, -limit, limit) in place.
  double grad_sum_squares() { return k_->sum_squares(grads_); }
  double grad_sum_squares(int64_t begin, int64_t end) { return k_->sum_squares(grads_.slice(begin, end)); }
  void clip_grad_values(float scale, float limit) { k_->clip_values(grads_, scale, limit); }
  // A fixed step's decision where the update runs (OptimUpdateKernel::decide_step), nothing read
  // back: `step` then tells update_from whether to skip and by what to scale the gradients.
  void decide_step(const StepRule& r, StepScalars* step, StepCheck* check) { k_->decide_step(grads_, r, step, check); }
  // The same over a model in parts (a pipeline's stages): this part's measure, then the decision
  // from every part's, in part order (OptimUpdateKernel::measure_step / decide_parts).
  void measure_step(const StepRule& r, StepCheck* part) { k_->measure_step(grads_, r, part); }
  void decide_parts(const StepRule& r, const StepCheck* parts, int n, StepScalars* step, StepCheck* check) {
    k_->decide_parts(grads_, r, parts, n, step, check);
  }
  // A fixed step's values from the state it keeps where it runs, and that state advanced after
  // decide_step (OptimUpdateKernel::begin_fixed / end_fixed).
  void begin_fixed(StepState* state, const StateRule& r, StepScalars* step) { k_->begin_fixed(state, r, step); }
  void end_fixed(StepState* state, const StateRule& r, const StepScalars* step) { k_->end_fixed(state, r, step); }
  // The bias corrections of the update that takes the count to `t` (Adam's 1 - beta^t; 1 for the
  // others): step_scalars' values at t = steps(), and StepScalars::bias_ring's.
  virtual void bias_at(int64_t /*t*/, float& bias1, float& bias2) const { bias1 = bias2 = 1.0f; }
  // State buffers by name, for checkpoints ("momentum", "m", "v", ...).
  virtual std::vector<std::pair<std::string, Tensor*>> state() = 0;
  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }
  double base_lr() const { return lr_; }
  // The undecayed spans of the flat buffer (exclude_from_decay's, sorted and merged).
  const std::vector<std::pair<int64_t, int64_t>>& no_decay_spans() const { return no_decay_; }
  void set_base_lr(double lr) { lr_ = lr; }
  virtual std::string describe() const = 0;

 protected:
  virtual void allocate_state(OpContext& ctx, int64_t n) = 0;
  // The [begin, end) range of a flat buffer (undefined stays undefined).
  static Tensor range(const Tensor& t, int64_t begin, int64_t end) { return t.defined() ? t.slice(begin, end) : t; }
  // f(b, e, decays) over [begin, end) cut at the parameters excluded from weight decay (decays
  // false inside them), in order; one call when nothing is excluded.
  template <class F>
  void by_decay(int64_t begin, int64_t end, F&& f) const {
    int64_t at = begin;
    for (const auto& [b, e] : no_decay_) {  // sorted, disjoint
      if (e <= at) continue;
      if (b >= end) break;
      if (b > at) f(at, b, true);
      const int64_t to = std::min(e, end);
      f(std::max(b, at), to, false);
      at = to;
    }
    if (at < end || begin == end) f(at, end, true);
  }
  Tensor weights_, grads_;
  std::vector<std::string> exclude_patterns_;
  std::vector<std::pair<int64_t, int64_t>> no_decay_;  // the excluded parameters' spans, sorted and merged
  friend std::unique_ptr<Optimizer> make_optimizer(const struct OptimizerSpec& spec);
  double lr_ = 0.01;
  int64_t steps_ = 0;
  std::unique_ptr<OptimUpdateKernel> k_;
};

// The `optimizer:` section, read once (read_optimizer): every type's hyperparameters, each type
// reading the keys it has (the others keep their defaults and are refused in the config).
struct OptimizerSpec {
  std::string type = "sgd";         // sgd | adam | adamw | rmsprop (registered types)
  // keras (default): Keras 3's definitions; pytorch: torch.optim's (optim_update.h, optim_math.h).
  OptimConvention convention = OptimConvention::Keras;
  double lr = 0.01;                 // the type's and convention's default when absent (keras: sgd 0.01, the
                                    // others 1e-3; pytorch: sgd 1e-3, rmsprop 0.01, adam 1e-3)
  double momentum = 0;              // sgd, rmsprop
  bool nesterov = false;            // sgd
  double weight_decay = 0;          // keras: decoupled on every type (adamw default 0.004); pytorch: sgd, adam,
                                    // rmsprop L2 added to the gradient, adamw decoupled (default 0.01)
  double beta1 = 0.9, beta2 = 0.999;  // adam, adamw
  double epsilon = 1e-7;            // adam, adamw, rmsprop (keras 1e-7, pytorch 1e-8)
  double rho = 0.9;                 // rmsprop (keras 0.9, pytorch's alpha 0.99)
  bool centered = false;            // rmsprop
  std::string lr_scaling = "none";  // none | linear (lr x replicas, Goyal et al.): data parallelism
  std::vector<std::string> exclude_from_weight_decay;  // patterns (Optimizer::exclude_from_decay)
  cfg::Node node;                   // the section, for messages
};

// An optimizer type: how it reads its keys into a spec, and how it is made from one.
struct OptimizerType {
  std::function<void(cfg::MapReader&, OptimizerSpec&)> read;
  std::function<std::unique_ptr<Optimizer>(const OptimizerSpec&)> make;
};
void register_optimizer(const std::string& type, OptimizerType t);
std::vector<std::string> optimizer_types();
// `optimizer:` {type: sgd|adam|adamw|rmsprop, convention: keras|pytorch, lr, ...} (absent: sgd,
// keras); the convention is read before the type's keys (their defaults may depend on it); unknown
// keys and bad values are config errors at their line.
OptimizerSpec read_optimizer(const cfg::Node& section);
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec);

}  // namespace trainer
