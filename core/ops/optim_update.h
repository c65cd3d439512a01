// Optimizer update op family: fused in-place updates over the flat parameter buffer, and the finiteness check of the gradients (loss scaling).
#pragma once
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"
#include "core/ops/step_scalars.h"

namespace trainer {

// Whose definitions an update follows (optimizer.convention): Keras 3's (the default) or PyTorch's.
// The formulas are optim_math.h's and docs/config-reference.md's.
enum class OptimConvention { Keras, PyTorch };
inline const char* convention_name(OptimConvention c) { return c == OptimConvention::Keras ? "keras" : "pytorch"; }

// Per-step scalars; grad_scale multiplies every gradient first (folds replica averaging in).
// `step`, when set, overrides lr and grad_scale (and Adam's bias corrections) with the values in
// that memory when the update runs (StepScalars: a recorded step replays with new ones); it is
// device memory on a GPU.
struct SgdStep {
  float lr, momentum, weight_decay, grad_scale;
  bool nesterov;
  OptimConvention convention = OptimConvention::Keras;  // keras: decoupled weight decay; pytorch: L2
  const StepScalars* step = nullptr;
};
struct AdamStep {
  float lr, beta1, beta2, epsilon, weight_decay, grad_scale;
  bool decoupled;  // w -= lr * wd * w, instead of adding wd * w to the gradient (set under keras)
  float bias1, bias2;  // 1 - beta1^t, 1 - beta2^t
  OptimConvention convention = OptimConvention::Keras;
  const StepScalars* step = nullptr;
};
struct RmspropStep {
  float lr, rho, momentum, epsilon, weight_decay, grad_scale;
  bool centered;
  OptimConvention convention = OptimConvention::Keras;  // keras: decoupled weight decay; pytorch: L2
  const StepScalars* step = nullptr;
};

struct OptimUpdateParams {};

class OptimUpdateKernel {
 public:
  using Params = OptimUpdateParams;
  static constexpr const char* kName = "optim_update";
  virtual ~OptimUpdateKernel() = default;
  OptimUpdateKernel(const OptimUpdateKernel&) = delete;
  OptimUpdateKernel& operator=(const OptimUpdateKernel&) = delete;

  // w, g, and the state buffers are flat f32 tensors of equal length. State buffers a
  // configuration does not use (SGD without momentum, RMSprop without momentum or centering) may be
  // undefined. The messages name the optimizer ("adam: m is undefined").
  // SGD. keras: w -= lr*wd*w; v = momentum*v - lr*g'; w += nesterov ? momentum*v - lr*g' : v, where
  // g' = g*scale. pytorch: v = momentum*v + g'; w -= lr * (nesterov ? g' + momentum*v : v), where
  // g' = g*scale + wd*w. Without a velocity (momentum 0 only): w -= lr*g' (after the decay).
  void sgd(Tensor& w, const Tensor& g, Tensor& velocity, const SgdStep& s) {
    const shape_checks::Checks ck("sgd", dev_);
    check_wg(ck, w, g);
    check_state(ck, "velocity", velocity, w, s.momentum != 0.0f);
    sgd_impl(w, g, velocity, s);
  }
  // Adam(W): m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2 (decoupled: w -= lr*wd*w first);
  // keras: w -= lr*sqrt(bias2)/bias1 * m / (sqrt(v) + eps); pytorch: w -= lr * (m/bias1) / (sqrt(v/bias2) + eps)
  void adam(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) {
    const shape_checks::Checks ck("adam", dev_);
    check_wg(ck, w, g);
    check_state(ck, "m", m, w, true);
    check_state(ck, "v", v, w, true);
    if (!s.step && (!(s.bias1 > 0.0f) || !(s.bias2 > 0.0f))) ck.fail("bias corrections must be positive (step >= 1)");
    adam_impl(w, g, m, v, s);
  }
  // RMSprop: ms = rho ms + (1-rho) g'^2 [mg = rho mg + (1-rho) g' when centered]. keras (w -= lr*wd*w
  // first): denom = sqrt(ms - mg^2 + eps); with momentum mom = momentum*mom + lr g'/denom, w -= mom;
  // without w -= lr g'/denom. pytorch (g' has + wd*w): denom = sqrt(ms - mg^2) + eps; with momentum
  // mom = momentum*mom + g'/denom, w -= lr*mom; without w -= lr g'/denom.
  void rmsprop(Tensor& w, const Tensor& g, Tensor& ms, Tensor& mom, Tensor& mg, const RmspropStep& s) {
    const shape_checks::Checks ck("rmsprop", dev_);
    check_wg(ck, w, g);
    check_state(ck, "ms", ms, w, true);
    check_state(ck, "mom", mom, w, s.momentum != 0.0f);
    check_state(ck, "mg", mg, w, s.centered);
    rmsprop_impl(w, g, ms, mom, mg, s);
  }
  // Whether every element of the flat f32 tensor g is finite (no inf, no NaN); waits for the
  // device. A logical AND: the same answer whatever the order, on every backend.
  bool all_finite(const Tensor& g) {
    shape_checks::Checks("all_finite", dev_).dtype("g", g, DType::F32);
    return all_finite_impl(g);
  }
  // The sum of squares of the flat f32 tensor g (gradient clipping's global norm), in
  // grad_clip_math.h's fixed order: the same bits on every backend and thread count. Waits for the device.
  double sum_squares(const Tensor& g) {
    shape_checks::Checks("sum_squares", dev_).dtype("g", g, DType::F32);
    return g.numel() == 0 ? 0.0 : sum_squares_impl(g);
  }
  // g = clamp(g·scale, -limit, limit) in place (gradient clipping by value, after unscaling).
  void clip_values(Tensor& g, float scale, float limit) {
    const shape_checks::Checks ck("clip_values", dev_);
    ck.dtype("g", g, DType::F32);
    if (!(limit > 0.0f)) ck.fail("the limit must be positive");
    if (g.numel() > 0) clip_values_impl(g, scale, limit);
  }
  // train.ema's moving average in one pass: avg = decay·avg + (1 − decay)·w, each product rounded
  // to fp32 before the sum (the bits of the element-wise passes). With `step` (a fixed step's
  // memory, read where it runs): nothing when the step is skipped or does not average.
  void average(Tensor& avg, const Tensor& w, float decay, const StepScalars* step) {
    const shape_checks::Checks ck("average", dev_);
    ck.dtype("avg", avg, DType::F32);
    ck.dtype("w", w, DType::F32);
    ck.same_numel("w", w, "avg", avg);
    if (!(decay >= 0.0f && decay <= 1.0f)) ck.fail("the decay must be in [0, 1], got ", decay);
    if (avg.numel() > 0) average_impl(avg, w, decay, float(1.0 - double(decay)), step);
  }
  // A fixed step's update decided where it runs, with nothing read back (grad_clip_math::
  // decide_step): g's finiteness (r.check_finite) and sum of squares (r.clip) into `check`, then
  // step->skip and, under clip_norm, step->grad_scale; under clip_value g unscaled by
  // step->unscale and clipped in place unless the step is skipped. `step` and `check` are this
  // context's memory (the device's on a GPU). The same finiteness, sum and factor as all_finite,
  // sum_squares and GradClip on the host: the same bits.
  void decide_step(Tensor& g, const StepRule& r, StepScalars* step, StepCheck* check) {
    const shape_checks::Checks ck("decide_step", dev_);
    ck.dtype("g", g, DType::F32);
    if (r.clip != StepRule::None && !(r.limit > 0)) ck.fail("the clip limit must be positive");
    if (!step || !check) ck.fail("step and check memory are required");
    decide_step_impl(g, r, step, check);
  }
  // decide_step over a model held in parts (a pipeline's stages, each with its optimizer): each
  // part measures its g (`part`: finiteness under r.check_finite, sum of squares under r.clip, as
  // decide_step does), the parts' measures are gathered in every part's memory, and decide_parts
  // takes them in part order — finite when all are, the sum of squares added in that order, as
  // StepUpdate::apply adds the parts' on the host — to decide the step as decide_step does (and
  // under clip_value to clip this part's g).
  void measure_step(const Tensor& g, const StepRule& r, StepCheck* part) {
    const shape_checks::Checks ck("measure_step", dev_);
    ck.dtype("g", g, DType::F32);
    if (!part) ck.fail("check memory is required");
    measure_step_impl(g, r, part);
  }
  void decide_parts(Tensor& g, const StepRule& r, const StepCheck* parts, int n, StepScalars* step, StepCheck* check) {
    const shape_checks::Checks ck("decide_parts", dev_);
    ck.dtype("g", g, DType::F32);
    if (r.clip != StepRule::None && !(r.limit > 0)) ck.fail("the clip limit must be positive");
    if (!parts || n < 1 || !step || !check) ck.fail("the parts' checks, step and check memory are required");
    decide_parts_impl(g, r, parts, n, step, check);
  }
  // A fixed step's values kept where it runs (StepState, this context's memory; step_state_math):
  // begin_fixed derives the step's loss and gradient factors, Adam's corrections and the moving
  // average's cadence from the state and the host's values in `step`; end_fixed, after
  // decide_step, advances the state (the scale, its growth count, the updates applied).
  void begin_fixed(StepState* state, const StateRule& r, StepScalars* step) {
    if (!state || !step) shape_checks::Checks("begin_fixed", dev_).fail("state and step memory are required");
    begin_fixed_impl(state, r, step);
  }
  void end_fixed(StepState* state, const StateRule& r, const StepScalars* step) {
    if (!state || !step) shape_checks::Checks("end_fixed", dev_).fail("state and step memory are required");
    end_fixed_impl(state, r, step);
  }

 protected:
  OptimUpdateKernel(const OpContext& c, const Params&) : dev_(c.device()) {}
  // Called with checked arguments only: sgd_impl's velocity is defined iff it is used (momentum
  // != 0, or given); rmsprop_impl reads mom only when s.momentum != 0 and mg only when centered.
  virtual void sgd_impl(Tensor& w, const Tensor& g, Tensor& velocity, const SgdStep& s) = 0;
  virtual void adam_impl(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) = 0;
  virtual void rmsprop_impl(Tensor& w, const Tensor& g, Tensor& ms, Tensor& mom, Tensor& mg, const RmspropStep& s) = 0;
  virtual bool all_finite_impl(const Tensor& g) = 0;
  virtual double sum_squares_impl(const Tensor& g) = 0;  // g not empty
  virtual void clip_values_impl(Tensor& g, float scale, float limit) = 0;
  virtual void decide_step_impl(Tensor& g, const StepRule& r, StepScalars* step, StepCheck* check) = 0;
  virtual void measure_step_impl(const Tensor& g, const StepRule& r, StepCheck* part) = 0;
  virtual void decide_parts_impl(Tensor& g, const StepRule& r, const StepCheck* parts, int n, StepScalars* step,
                                 StepCheck* check) = 0;
  virtual void begin_fixed_impl(StepState* state, const StateRule& r, StepScalars* step) = 0;
  virtual void end_fixed_impl(StepState* state, const StateRule& r, const StepScalars* step) = 0;
  virtual void average_impl(Tensor& avg, const Tensor& w, float decay, float rest, const StepScalars* step) = 0;  // avg not empty

 private:
  static void check_wg(const shape_checks::Checks& ck, const Tensor& w, const Tensor& g) {
    ck.dtype("w", w, DType::F32);
    ck.dtype("g", g, DType::F32);
    ck.same_numel("g", g, "w", w);
  }
  static void check_state(const shape_checks::Checks& ck, const char* name, const Tensor& t, const Tensor& w,
                          bool needed) {
    if (!needed && !t.defined()) return;
    ck.dtype(name, t, DType::F32);
    ck.same_numel(name, t, "w", w);
  }
  Device dev_;
};

}  // namespace trainer
