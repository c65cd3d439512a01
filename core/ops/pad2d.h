// Pad2d op family: constant-zero spatial padding of NHWC activations (Keras ZeroPadding2D); backward crops.
#pragma once
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct Pad2dParams {
  int top = 0, bottom = 0, left = 0, right = 0;  // rows/columns of zeros, each >= 0
};

inline Shape pad2d_output_shape(const Shape& hwc, const Pad2dParams& p) {
  return {hwc[0] + p.top + p.bottom, hwc[1] + p.left + p.right, hwc[2]};
}

class Pad2dKernel {
 public:
  using Params = Pad2dParams;
  static constexpr const char* kName = "pad2d";
  virtual ~Pad2dKernel() = default;
  Pad2dKernel(const Pad2dKernel&) = delete;
  Pad2dKernel& operator=(const Pad2dKernel&) = delete;

  // x [N,H,W,C] (f32, bf16 or f16) -> y [N,H+top+bottom,W+left+right,C] of x's type, zeros
  // around a copy of x.
  void forward(const Tensor& x, Tensor& y) {
    ck_.floating("x", x);
    ck_.has_rank("x", x, 4);
    ck_.like("y", y, x, output_shape(x.shape()));
    forward_impl(x, y);
  }
  // dx [N,H,W,C] (overwritten) = the interior of dy, where x was copied to.
  void backward(const Tensor& dy, Tensor& dx) {
    ck_.floating("dx", dx);
    ck_.has_rank("dx", dx, 4);
    ck_.like("dy", dy, dx, output_shape(dx.shape()));
    backward_impl(dy, dx);
  }

 protected:
  Pad2dKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.top < 0 || p.bottom < 0 || p.left < 0 || p.right < 0)
      ck_.fail("padding ", p.top, "/", p.bottom, " x ", p.left, "/", p.right, " must not be negative");
  }
  // Called with checked arguments only.
  virtual void forward_impl(const Tensor& x, Tensor& y) = 0;
  virtual void backward_impl(const Tensor& dy, Tensor& dx) = 0;

  Shape output_shape(const Shape& x) const { return pad2d_output_shape(x.without_batch(), p_).with_batch(x[0]); }

  const Params p_;

 private:
  shape_checks::Checks ck_;
};

}  // namespace trainer
