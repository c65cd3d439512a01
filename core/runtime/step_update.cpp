// The step's update over the model's parts: finite check, global norm, clip, step, loss scale.
#include "core/runtime/step_update.h"

#include <algorithm>

namespace trainer {

bool StepUpdate::apply(const std::vector<UpdatePart>& parts, const ForEachPart& each, float lr) {
  const size_t n = parts.size();
  bool finite = true;
  if (scaler_.enabled()) {
    std::vector<char> ok(n, 1);
    each([&](int i) { ok[size_t(i)] = parts[size_t(i)].optimizer->grads_finite(); });
    finite = std::all_of(ok.begin(), ok.end(), [](char c) { return c != 0; });
  }
  if (!finite) {
    clip_.skipped();
    scaler_.update(false);  // no update, the step count unchanged
    return false;
  }
  const float inv_scale = 1.0f / scaler_.scale();
  double squares = 0;
  if (clip_.enabled()) {
    // Each part's sum of squares on its own thread, added in part order (the same order, so the
    // same norm, on every copy).
    std::vector<double> q(n);
    each([&](int i) {
      const UpdatePart& p = parts[size_t(i)];
      double s = p.optimizer->grad_sum_squares();
      for (const auto& [b, e] : p.counted_elsewhere) s -= p.optimizer->grad_sum_squares(b, e);
      q[size_t(i)] = s;
    });
    for (double s : q) squares += s;
  }
  const float grad_scale = clip_.begin(squares, inv_scale);
  each([&](int i) {
    Optimizer& opt = *parts[size_t(i)].optimizer;
    clip_.clip(opt, inv_scale);   // clip_value: unscaled and clipped in place
    opt.step(lr, grad_scale);     // unscaled (and clipped by norm) inside the update
  });
  scaler_.update(true);
  return true;
}

StepRule StepUpdate::rule() const {
  StepRule r;
  r.check_finite = scaler_.enabled();
  r.clip = clip_.mode() == GradClipOptions::Mode::Norm    ? StepRule::Norm
           : clip_.mode() == GradClipOptions::Mode::Value ? StepRule::Value
                                                          : StepRule::None;
  r.limit = clip_.limit();
  r.keras = clip_.keras();
  return r;
}

StateRule StepUpdate::state_rule() const {
  StateRule r = scaler_.rule();
  r.clip_value = clip_.mode() == GradClipOptions::Mode::Value ? 1 : 0;
  return r;
}

bool StepUpdate::settle(const StepCheck& c) {
  if (scaler_.enabled() && !c.finite) {
    clip_.skipped();
    scaler_.update(false);
    return false;
  }
  clip_.begin(c.sum_squares, 1.0f / scaler_.scale());  // the norm, as the device measured it
  scaler_.update(true);
  return true;
}

}  // namespace trainer
