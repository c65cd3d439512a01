// Conv2d op family: 2-D convolution over NHWC activations with HWIO weights (Keras layout).
#pragma once
#include "core/ops/registry.h"
#include "core/ops/window.h"

namespace trainer {

struct Conv2dParams {
  int64_t filters = 0;
  int kh = 1, kw = 1;  // kernel
  int sh = 1, sw = 1;  // strides
  int dh = 1, dw = 1;  // dilation
  Padding padding = Padding::Valid;
  bool bias = true;
};

// Everything a kernel needs about one call's shapes; computed once here for every backend.
struct ConvGeometry {
  int64_t n, ih, iw, ic, oh, ow, oc;
  int pt, pb, pl, pr;  // top, bottom, left, right padding
};

inline ConvGeometry conv2d_geometry(const Shape& x, const Conv2dParams& p) {
  Window1d h = window_1d(x[1], p.kh, p.sh, p.dh, p.padding);
  Window1d w = window_1d(x[2], p.kw, p.sw, p.dw, p.padding);
  return {x[0], x[1], x[2], x[3], h.out, w.out, p.filters, h.pad_before, h.pad_after, w.pad_before, w.pad_after};
}

// Output shape without batch for an input shape without batch (HWC); an output dimension of 0
// means the window does not fit (the caller reports it).
inline Shape conv2d_output_shape(const Shape& hwc, const Conv2dParams& p) {
  return {window_1d(hwc[0], p.kh, p.sh, p.dh, p.padding).out, window_1d(hwc[1], p.kw, p.sw, p.dw, p.padding).out,
          p.filters};
}

inline Shape conv2d_weight_shape(int64_t in_channels, const Conv2dParams& p) {
  return {p.kh, p.kw, in_channels, p.filters};
}

class Conv2dKernel {
 public:
  using Params = Conv2dParams;
  static constexpr const char* kName = "conv2d";
  virtual ~Conv2dKernel() = default;
  // x [N,H,W,C], w [KH,KW,C,F], b [F] (undefined when !bias) -> y [N,OH,OW,F]
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  // dw, db are overwritten; dx (overwritten) may be undefined when no input gradient is needed.
  virtual void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) = 0;
};

}  // namespace trainer
