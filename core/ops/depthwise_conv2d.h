// DepthwiseConv2d op family: per-channel 2-D convolution over NHWC activations, weights [KH,KW,C,M] (Keras layout).
#pragma once
#include "core/ops/conv2d.h"
#include "core/ops/registry.h"
#include "core/ops/window.h"

namespace trainer {

// Keras DepthwiseConv2D / tf.nn.depthwise_conv2d: input channel c is convolved with M = multiplier
// filters of its own; output channel c * M + m holds filter m of channel c, so y has C * M channels.
struct DepthwiseConv2dParams {
  int multiplier = 1;  // depth_multiplier
  int kh = 1, kw = 1;  // kernel
  int sh = 1, sw = 1;  // strides
  int dh = 1, dw = 1;  // dilation
  Padding padding = Padding::Valid;
  bool bias = true;
  // Zeros added around the input (top, bottom, left, right) before valid windows: a zero_pad2d
  // layer folded into this one (Graph: the pad_fold fast path); all 0 otherwise.
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
};

// The conv2d geometry (same window arithmetic and Keras 'same' padding) with oc = C * multiplier.
inline ConvGeometry depthwise_conv2d_geometry(const Shape& x, const DepthwiseConv2dParams& p) {
  Window1d h = window_1d(x[1], p.kh, p.sh, p.dh, p.padding, p.pad_top, p.pad_bottom);
  Window1d w = window_1d(x[2], p.kw, p.sw, p.dw, p.padding, p.pad_left, p.pad_right);
  return {x[0], x[1], x[2], x[3], h.out, w.out, x[3] * p.multiplier, h.pad_before, h.pad_after, w.pad_before,
          w.pad_after};
}

// Output shape without batch for an input shape without batch (HWC); an output dimension of 0
// means the window does not fit (the caller reports it).
inline Shape depthwise_conv2d_output_shape(const Shape& hwc, const DepthwiseConv2dParams& p) {
  return {window_1d(hwc[0], p.kh, p.sh, p.dh, p.padding, p.pad_top, p.pad_bottom).out,
          window_1d(hwc[1], p.kw, p.sw, p.dw, p.padding, p.pad_left, p.pad_right).out, hwc[2] * p.multiplier};
}

// Keras' depthwise_kernel shape [kh, kw, C, M]; flat index ((ky * kw + kx) * C + c) * M + m, i.e.
// tap-major with the output channel c * M + m innermost.
inline Shape depthwise_conv2d_weight_shape(int64_t channels, const DepthwiseConv2dParams& p) {
  return {p.kh, p.kw, channels, p.multiplier};
}

class DepthwiseConv2dKernel {
 public:
  using Params = DepthwiseConv2dParams;
  static constexpr const char* kName = "depthwise_conv2d";
  virtual ~DepthwiseConv2dKernel() = default;
  DepthwiseConv2dKernel(const DepthwiseConv2dKernel&) = delete;
  DepthwiseConv2dKernel& operator=(const DepthwiseConv2dKernel&) = delete;

  // x [N,H,W,C] (f32, bf16 or f16), w [KH,KW,C,M] f32, b [C*M] f32 (ignored, may be undefined,
  // when !bias) -> y [N,OH,OW,C*M] of x's type.
  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
    const ConvGeometry g = check(x, w);
    check_conv_forward(ck_, g, x, b, y, p_.bias);
    forward_impl(g, x, w, b, y);
  }
  // dy of y's shape and x's type; dw, db (f32) are overwritten; dx (x's type, overwritten) may be
  // undefined when no input gradient is needed.
  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) {
    const ConvGeometry g = check(x, w);
    check_conv_backward(ck_, g, x, w, dy, dx, dw, db, p_.bias);
    backward_impl(g, x, w, dy, dx, dw, db);
  }

 protected:
  DepthwiseConv2dKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.multiplier <= 0) ck_.fail("depth multiplier must be positive, got ", p.multiplier);
    if (p.pad_top < 0 || p.pad_bottom < 0 || p.pad_left < 0 || p.pad_right < 0 ||
        (p.padding != Padding::Valid && p.pad_top + p.pad_bottom + p.pad_left + p.pad_right > 0))
      ck_.fail("explicit padding must be non-negative and comes with 'valid' windows only");
    check_conv_window(ck_, p.kh, p.kw, p.sh, p.sw, p.dh, p.dw);
  }
  // Called with checked arguments only; g is depthwise_conv2d_geometry(x.shape(), p_).
  virtual void forward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  virtual void backward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                             Tensor& dw, Tensor& db) = 0;

  const Params p_;

 private:
  ConvGeometry check(const Tensor& x, const Tensor& w) const {
    check_conv_input(ck_, x);
    const ConvGeometry g = depthwise_conv2d_geometry(x.shape(), p_);
    ck_.shape("w", w, depthwise_conv2d_weight_shape(g.ic, p_));
    return g;
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
