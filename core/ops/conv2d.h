// Conv2d op family: 2-D convolution over NHWC activations with HWIO weights (Keras layout).
#pragma once
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"
#include "core/ops/window.h"

namespace trainer {

struct Conv2dParams {
  int64_t filters = 0;
  int kh = 1, kw = 1;  // kernel
  int sh = 1, sw = 1;  // strides
  int dh = 1, dw = 1;  // dilation
  Padding padding = Padding::Valid;
  bool bias = true;
  // Zeros added before and after each row (the width axis) before valid windows: conv1d's causal
  // padding, (k - 1)·dilation before the steps; 0 otherwise.
  int pad_left = 0, pad_right = 0;
};

// Everything a kernel needs about one call's shapes; computed once here for every backend.
struct ConvGeometry {
  int64_t n, ih, iw, ic, oh, ow, oc;
  int pt, pb, pl, pr;  // top, bottom, left, right padding
};

inline ConvGeometry conv2d_geometry(const Shape& x, const Conv2dParams& p) {
  Window1d h = window_1d(x[1], p.kh, p.sh, p.dh, p.padding);
  Window1d w = window_1d(x[2], p.kw, p.sw, p.dw, p.padding, p.pad_left, p.pad_right);
  return {x[0], x[1], x[2], x[3], h.out, w.out, p.filters, h.pad_before, h.pad_after, w.pad_before, w.pad_after};
}

// Output shape without batch for an input shape without batch (HWC); an output dimension of 0
// means the window does not fit (the caller reports it).
inline Shape conv2d_output_shape(const Shape& hwc, const Conv2dParams& p) {
  return {window_1d(hwc[0], p.kh, p.sh, p.dh, p.padding).out, window_1d(hwc[1], p.kw, p.sw, p.dw, p.padding, p.pad_left, p.pad_right).out,
          p.filters};
}

inline Shape conv2d_weight_shape(int64_t in_channels, const Conv2dParams& p) {
  return {p.kh, p.kw, in_channels, p.filters};
}

// The window parameters of conv2d and depthwise_conv2d: kernel, strides and dilation of at least 1.
inline void check_conv_window(const shape_checks::Checks& ck, int kh, int kw, int sh, int sw, int dh, int dw) {
  if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1)
    ck.fail("kernel ", kh, "x", kw, ", strides ", sh, "x", sw, " and dilation ", dh, "x", dw, " must be positive");
}

// The argument checks of conv2d and depthwise_conv2d (shared: only the weight shape and the output
// channels differ, both in the geometry): activations x, y, dy, dx of one float type, weights,
// bias and their gradients f32.
inline void check_conv_input(const shape_checks::Checks& ck, const Tensor& x) {
  ck.floating("x", x);
  ck.has_rank("x", x, 4);
}
inline void check_conv_forward(const shape_checks::Checks& ck, const ConvGeometry& g, const Tensor& x, const Tensor& b,
                               const Tensor& y, bool bias) {
  if (bias) ck.shape("b", b, {g.oc});
  ck.like("y", y, x, {g.n, g.oh, g.ow, g.oc});
}
// dw may be undefined where `dw_optional` (conv2d's input gradient alone); db is checked where there is a bias.
inline void check_conv_backward(const shape_checks::Checks& ck, const ConvGeometry& g, const Tensor& x,
                                const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                                bool bias, bool dw_optional = false) {
  ck.like("dy", dy, x, {g.n, g.oh, g.ow, g.oc});
  if (dw.defined() || !dw_optional) ck.shape("dw", dw, w.shape());
  if (bias) ck.shape("db", db, {g.oc});
  if (dx.defined()) ck.like("dx", dx, x, x.shape());
}

class Conv2dKernel {
 public:
  using Params = Conv2dParams;
  static constexpr const char* kName = "conv2d";
  virtual ~Conv2dKernel() = default;
  Conv2dKernel(const Conv2dKernel&) = delete;
  Conv2dKernel& operator=(const Conv2dKernel&) = delete;

  // x [N,H,W,C] (f32, bf16 or f16), w [KH,KW,C,F] f32, b [F] f32 (ignored, may be undefined,
  // when !bias) -> y [N,OH,OW,F] of x's type.
  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
    const ConvGeometry g = check(x, w);
    check_conv_forward(ck_, g, x, b, y, p_.bias);
    forward_impl(g, x, w, b, y);
  }
  // Whether backward can add the input gradient into dx (add_dx) instead of overwriting it: the
  // second consumer of a tensor adding its share in place of a separate sum (Layer::can_add_input_grad).
  virtual bool adds_dx() const { return false; }

  // dy of y's shape and x's type; dw, db (f32) are overwritten; dx (x's type) is overwritten, or
  // with add_dx (where adds_dx()) added to, and may be undefined when no input gradient is needed.
  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db,
                bool add_dx = false) {
    const ConvGeometry g = check(x, w);
    check_conv_backward(ck_, g, x, w, dy, dx, dw, db, p_.bias);
    ck_.add_into(add_dx, adds_dx(), dx, " for this window");
    if (add_dx)
      backward_add_impl(g, x, w, dy, dx, dw, db);
    else
      backward_impl(g, x, w, dy, dx, dw, db);
  }
  // The input gradient alone, dx (overwritten) from dy: backward's dx, the same bits, without the
  // weights' gradient (conv2d_transpose's forward). dx's shape is x's; a convolution without bias.
  void backward_data(const Tensor& w, const Tensor& dy, Tensor& dx) {
    if (p_.bias) ck_.fail("backward_data takes a convolution without bias");
    const ConvGeometry g = check(dx, w);
    check_conv_backward(ck_, g, dx, w, dy, dx, Tensor(), Tensor(), false, true);
    Tensor none;
    backward_impl(g, dx, w, dy, dx, none, none);
  }

 protected:
  Conv2dKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (p.filters <= 0) ck_.fail("filters must be positive, got ", p.filters);
    check_conv_window(ck_, p.kh, p.kw, p.sh, p.sw, p.dh, p.dw);
  }
  // Called with checked arguments only; g is conv2d_geometry(x.shape(), p_). backward_impl's dw is
  // undefined for backward_data (whose x is dx: its shape and type only, never its values).
  virtual void forward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  virtual void backward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                             Tensor& dw, Tensor& db) = 0;
  // backward with dx added to: called only where adds_dx(), so a backend without it never is.
  virtual void backward_add_impl(const ConvGeometry&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                                 Tensor&) {
    throw std::logic_error("conv2d: backward adding into dx on a backend without it");
  }

  const Params p_;

 private:
  ConvGeometry check(const Tensor& x, const Tensor& w) const {
    check_conv_input(ck_, x);
    const ConvGeometry g = conv2d_geometry(x.shape(), p_);
    ck_.shape("w", w, conv2d_weight_shape(g.ic, p_));
    if (g.ic == 0) ck_.fail("x has no channels");
    return g;
  }
  shape_checks::Checks ck_;
};

}  // namespace trainer
