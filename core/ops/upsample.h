// Upsample op family: nearest-neighbour or bilinear upsampling of an image by integer factors (Keras's UpSampling2D), and its gradient.
#pragma once
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct UpsampleParams {
  int sh = 2, sw = 2;     // factors along height and width (Keras's size)
  bool bilinear = false;  // Keras's interpolation: nearest (false) or bilinear (upsample_math.h's taps)
};

class UpsampleKernel {
 public:
  using Params = UpsampleParams;
  static constexpr const char* kName = "upsample";
  virtual ~UpsampleKernel() = default;
  UpsampleKernel(const UpsampleKernel&) = delete;
  UpsampleKernel& operator=(const UpsampleKernel&) = delete;

  // x [N, H, W, C], y [N, H·sh, W·sw, C] of x's float type: y[n, i, j, c] = x[n, i / sh, j / sw, c]
  // (nearest), or TensorFlow's bilinear value of the four inputs around (i, j) in f32, rounded once.
  void forward(const Tensor& x, Tensor& y) {
    ck_.floating("x", x);
    ck_.has_rank("x", x, 4);
    ck_.like("y", y, x, out_shape(x.shape()));
    forward_impl(x, y);
  }
  // dx[n, i, j, c] = the sum of dy over the sh x sw block it was copied to (nearest), or over the
  // outputs that read it, each times its two weights (bilinear), in row-major order in f32, rounded
  // once (the same bits on every backend). dx does not alias dy.
  void backward(const Tensor& dy, Tensor& dx) {
    ck_.floating("dx", dx);
    ck_.has_rank("dx", dx, 4);
    ck_.like("dy", dy, dx, out_shape(dx.shape()));
    if (dx.data() == dy.data() && dx.numel() > 0) ck_.fail("dx must not alias dy");
    backward_impl(dy, dx);
  }

 protected:
  UpsampleKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {}
  // Called with checked arguments only.
  virtual void forward_impl(const Tensor& x, Tensor& y) = 0;
  virtual void backward_impl(const Tensor& dy, Tensor& dx) = 0;

  const Params p_;

 private:
  Shape out_shape(const Shape& x) const { return Shape{x[0], x[1] * p_.sh, x[2] * p_.sw, x[3]}; }
  shape_checks::Checks ck_;
};

}  // namespace trainer
