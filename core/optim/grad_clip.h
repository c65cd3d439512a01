// Gradient clipping (`train.clip_norm`, `train.clip_value`): the options, and the step's clip of a
// trainee's reduced gradients after loss-scale unscaling.
#pragma once
#include <cmath>
#include <string>

#include "core/io/config.h"
#include "core/optim/optimizer.h"

namespace trainer {

// `train.clip_norm: c` — the global L2 norm over every trainable parameter (every replica holds the
// all-reduced gradients; a pipeline's stages add their parts) scaled to at most c, as Keras's
// `global_clipnorm` and PyTorch's clip_grad_norm_ (the coefficient in the optimizer's convention:
// clip_coefficient). `train.clip_value: v` — each element clipped to [-v, v], as Keras's
// `clipvalue` and clip_grad_value_. At most one of the two, as in Keras. Both act on the
// gradients after the loss scale is divided out, and a step skipped for inf/NaN gradients
// (loss scaling) is not clipped.
struct GradClipOptions {
  enum class Mode { None, Norm, Value };
  Mode mode = Mode::None;
  double limit = 0;
  bool keras = true;  // optimizer.convention: keras (max_norm / max(norm, max_norm)) or pytorch
  bool enabled() const { return mode != Mode::None; }
  std::string describe() const;  // "clip_norm 1 (global L2 norm, Keras's coefficient)"
};

// The factor the gradients are multiplied by for a global norm `norm` and limit `max_norm`
// (grad_clip_math.h's, shared with the device: Keras's or PyTorch's definition).
double clip_coefficient(double norm, double max_norm, bool keras);

// Reads clip_norm and clip_value from the train section (both given: an error at clip_value).
GradClipOptions read_grad_clip(cfg::MapReader& train);

// One trainee's clipping. Per step, once the gradients are reduced (and found finite):
//   gs = begin(sum of squares of every stage's gradients, 1 / loss scale);
//   clip(optimizer) on each stage; then each stage's update with grad_scale gs.
class GradClip {
 public:
  GradClip() = default;
  explicit GradClip(const GradClipOptions& o) : o_(o) {}
  bool enabled() const { return o_.enabled(); }
  GradClipOptions::Mode mode() const { return o_.mode; }
  double limit() const { return o_.limit; }
  bool keras() const { return o_.keras; }
  // Records the global norm of the unscaled gradients (sqrt(sum_squares) · inv_scale) and returns
  // the grad_scale of the update: clip_norm: inv_scale × the coefficient; clip_value: 1 (clip()
  // unscales); none: inv_scale.
  float begin(double sum_squares, float inv_scale);
  // The norm begin() records: sqrt(sum_squares) · inv_scale, as every backend computes it.
  static double norm_of(double sum_squares, float inv_scale);
  // clip_value: the optimizer's gradients unscaled and clipped in place; otherwise nothing.
  void clip(Optimizer& opt, float inv_scale) const;
  // A step skipped (inf/NaN gradients): no norm.
  void skipped() { norm_ = NAN; }
  // The last step's norm before clipping (NaN when it was skipped or clipping is off).
  double grad_norm() const { return norm_; }

 private:
  GradClipOptions o_;
  double norm_ = NAN;
};

}  // namespace trainer
