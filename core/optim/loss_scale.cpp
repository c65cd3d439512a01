// The `train.loss_scale` reader and the loss scaler (GradScaler semantics).
#include "core/optim/loss_scale.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/ops/math/step_state_math.h"

namespace trainer {

std::string LossScaleOptions::describe() const {
  switch (mode) {
    case Mode::None: return "none";
    case Mode::Static: return fmt::format("static {:g}", init_scale);
    case Mode::Dynamic: break;
  }
  return fmt::format("dynamic (initial {:g}, x{:g} after {} finite steps, x{:g} and the step skipped on inf/NaN gradients)",
                     init_scale, growth_factor, growth_interval, backoff_factor);
}

LossScaleOptions read_loss_scale(const cfg::Node& node, Precision precision) {
  LossScaleOptions o;
  if (!node.defined()) {
    if (precision == Precision::FP16) o.mode = LossScaleOptions::Mode::Dynamic;
    return o;
  }
  const std::string valid = "valid: none, dynamic, a positive number (a static scale) or a mapping "
                            "{init_scale, growth_factor, backoff_factor, growth_interval} (dynamic)";
  if (node.is_map()) {
    cfg::MapReader r(node, "train.loss_scale");
    o.mode = LossScaleOptions::Mode::Dynamic;
    o.init_scale = r.get_float("init_scale", 65536.0, 1e-30, 1e38);
    o.growth_factor = r.get_float("growth_factor", 2.0, 1.0, 1e6);
    o.backoff_factor = r.get_float("backoff_factor", 0.5, 1e-6, 0.999);
    o.growth_interval = r.get_int("growth_interval", 2000, 1, int64_t(1) << 40);
    r.finish();
    return o;
  }
  if (!node.is_scalar()) node.fail(fmt::format("'{}' must be none, dynamic, a number or a mapping; {}", node.path(), valid));
  const std::string s = node.scalar();
  if (s == "none") return o;
  if (s == "dynamic") {
    o.mode = LossScaleOptions::Mode::Dynamic;
    return o;
  }
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    node.fail(fmt::format("'{}' is not a valid loss_scale for the train section{}; {}", s,
                          cfg::suggestion(s, {"none", "dynamic"}), valid));
  const double v = node.as<double>();
  if (!(v > 0) || v > 1e38) node.fail(fmt::format("'{}' must be a positive number (at most 1e38), not {}", node.path(), s));
  o.mode = LossScaleOptions::Mode::Static;
  o.init_scale = v;
  return o;
}

LossScaler::LossScaler(const LossScaleOptions& o) : o_(o), scale_(o.enabled() ? o.init_scale : 1.0) {}

StateRule LossScaler::rule() const {
  StateRule r;
  r.mode = !o_.enabled()                                  ? StateRule::NoScaling
           : o_.mode == LossScaleOptions::Mode::Dynamic ? StateRule::Dynamic
                                                         : StateRule::Static;
  r.growth_factor = float(o_.growth_factor);
  r.backoff_factor = float(o_.backoff_factor);
  r.growth_interval = o_.growth_interval;
  return r;
}

void LossScaler::update(bool finite) {
  if (!enabled()) return;
  if (!finite) {
    ++skipped_total_;
    ++skipped_epoch_;
  }
  // In float, as GradScaler keeps its scale (a float32 tensor): the same sequence of values — and
  // the same arithmetic as a fixed step's state on the device (step_state_math::end).
  StepState state;
  state.scale = float(scale_);
  state.good_steps = good_steps_;
  StepScalars step;
  step.skip = finite ? 0u : 1u;
  step_state_math::end(&state, rule(), step);
  scale_ = double(state.scale);
  good_steps_ = state.good_steps;
}

nlohmann::json LossScaler::state() const {
  if (!enabled()) return nlohmann::json::object();
  return {{"scale", scale_}, {"good_steps", good_steps_}, {"skipped_total", skipped_total_}, {"skipped_epoch", skipped_epoch_}};
}

void LossScaler::restore(const nlohmann::json& j) {
  if (!enabled() || !j.is_object() || j.empty()) return;
  // A static scale is the config's, not the checkpoint's (it may have been changed on resume).
  if (o_.mode == LossScaleOptions::Mode::Dynamic) scale_ = j.at("scale").get<double>();
  good_steps_ = j.value("good_steps", int64_t(0));
  skipped_total_ = j.value("skipped_total", int64_t(0));
  skipped_epoch_ = j.value("skipped_epoch", int64_t(0));
  if (!(scale_ > 0) || !std::isfinite(scale_)) throw std::out_of_range("the checkpoint's loss scale is not a positive number");
}

}  // namespace trainer
