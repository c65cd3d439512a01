// Pad2d op family: constant-zero spatial padding of NHWC activations (Keras ZeroPadding2D); backward crops.
#pragma once
#include "core/ops/registry.h"

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
  // x [N,H,W,C] -> y [N,H+top+bottom,W+left+right,C], zeros around a copy of x.
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  // dx [N,H,W,C] (overwritten) = the interior of dy, where x was copied to.
  virtual void backward(const Tensor& dy, Tensor& dx) = 0;
};

}  // namespace trainer
