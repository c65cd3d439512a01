// Gradient clipping: the train section's clip_norm / clip_value, and the per-step coefficient.
#include "core/optim/grad_clip.h"

#include <fmt/format.h>

#include <cmath>

#include "core/ops/math/grad_clip_math.h"

namespace trainer {

std::string GradClipOptions::describe() const {
  switch (mode) {
    case Mode::None: return "none";
    case Mode::Norm:
      return fmt::format("clip_norm {:g} (global L2 norm, {}'s coefficient)", limit, keras ? "Keras" : "PyTorch");
    case Mode::Value: break;
  }
  return fmt::format("clip_value {:g} (each gradient element)", limit);
}

GradClipOptions read_grad_clip(cfg::MapReader& train) {
  GradClipOptions o;
  cfg::Node norm = train.optional("clip_norm"), value = train.optional("clip_value");
  if (norm.defined() && value.defined())
    value.fail("train.clip_norm and train.clip_value exclude each other (as Keras's global_clipnorm and clipvalue): keep one");
  auto positive = [](const cfg::Node& n) {
    const double v = n.as<double>();  // a number, else an error naming what it got
    if (!(v > 0) || !std::isfinite(v)) n.fail(fmt::format("'{}' must be a positive number, not {}", n.path(), n.scalar()));
    return v;
  };
  if (norm.defined()) {
    o.mode = GradClipOptions::Mode::Norm;
    o.limit = positive(norm);
  } else if (value.defined()) {
    o.mode = GradClipOptions::Mode::Value;
    o.limit = positive(value);
  }
  return o;
}

double clip_coefficient(double norm, double max_norm, bool keras) {
  return grad_clip_math::clip_coefficient(norm, max_norm, keras);
}

double GradClip::norm_of(double sum_squares, float inv_scale) { return grad_clip_math::unscaled_norm(sum_squares, inv_scale); }

float GradClip::begin(double sum_squares, float inv_scale) {
  if (!enabled()) return inv_scale;
  norm_ = norm_of(sum_squares, inv_scale);
  if (o_.mode == GradClipOptions::Mode::Value) return 1.0f;
  return grad_clip_math::clipped_grad_scale(norm_, inv_scale, o_.limit, o_.keras);
}

void GradClip::clip(Optimizer& opt, float inv_scale) const {
  if (o_.mode == GradClipOptions::Mode::Value) opt.clip_grad_values(inv_scale, float(o_.limit));
}

}  // namespace trainer
