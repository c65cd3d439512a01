// Rescale op family: Keras's Rescaling, y = x·scale + offset with one scale and offset, or one per channel (the last axis), and its gradient dx = dy·scale.
#pragma once
#include <cmath>
#include <vector>

#include "core/ops/math/hd.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct RescaleParams {
  std::vector<float> scale{1.0f}, offset{0.0f};  // one value each, or one per channel (the same count)
};

namespace rescale_math {
// Keras's inputs * scale + offset: the product rounded, then the sum (never contracted into one
// fused multiply-add, so every backend rounds alike).
TRAINER_HD_INLINE float forward(float x, float scale, float offset) { return mul_rn(x, scale) + offset; }
}  // namespace rescale_math

class RescaleKernel {
 public:
  using Params = RescaleParams;
  static constexpr const char* kName = "rescale";
  virtual ~RescaleKernel() = default;
  RescaleKernel(const RescaleKernel&) = delete;
  RescaleKernel& operator=(const RescaleKernel&) = delete;

  // x [..., C] of a float type, y of x's shape and type (may be x): rescale_math::forward in f32,
  // rounded once to the type. With per-channel values, C must be their count.
  void forward(const Tensor& x, Tensor& y) {
    check(x, "x");
    ck_.like("y", y, x, x.shape());
    forward_impl(x, y);
  }
  // dx = dy·scale (one rounding), dx of dy's shape and type (may be dy).
  void backward(const Tensor& dy, Tensor& dx) {
    check(dy, "dy");
    ck_.like("dx", dx, dy, dy.shape());
    backward_impl(dy, dx);
  }

 protected:
  RescaleKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.scale.empty() || p.scale.size() != p.offset.size())
      ck_.fail("scale and offset must have one value each or one per channel, got ", p.scale.size(), " and ",
               p.offset.size());
    for (size_t i = 0; i < p.scale.size(); ++i)
      if (!std::isfinite(p.scale[i]) || !std::isfinite(p.offset[i])) ck_.fail("scale and offset must be finite");
  }
  // Called with checked arguments only: channels() values, applied along the last axis.
  virtual void forward_impl(const Tensor& x, Tensor& y) = 0;
  virtual void backward_impl(const Tensor& dy, Tensor& dx) = 0;
  int64_t channels() const { return int64_t(p_.scale.size()); }

  const Params p_;

 private:
  void check(const Tensor& t, const char* name) const {
    ck_.floating(name, t);
    if (p_.scale.size() > 1 && (t.shape().rank() == 0 || t.shape().back() != int64_t(p_.scale.size())))
      ck_.fail(name, " [", t.shape().str(), "] does not end in the ", p_.scale.size(), " channels of scale and offset");
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
