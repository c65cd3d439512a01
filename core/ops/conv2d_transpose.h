// Conv2d transpose op: Keras's Conv2DTranspose (a convolution run backwards: its input gradient as the output), composed from the device's conv2d and bias_add kernels.
#pragma once
#include <algorithm>
#include <memory>

#include "core/ops/bias.h"
#include "core/ops/conv2d.h"

namespace trainer {

// Conv2dParams (filters: the output's channels; no explicit row pads) and Keras's output_padding.
struct Conv2dTransposeParams : Conv2dParams {
  int out_pad_h = -1, out_pad_w = -1;  // -1: None (Keras's default)
};

// The output length along one axis for an input of length `in` (Keras's deconv_output_length).
inline int64_t conv_transpose_length(int64_t in, int k, int s, int d, Padding p, int out_pad) {
  const int64_t eff = int64_t(k - 1) * d + 1;
  if (out_pad < 0) return p == Padding::Same ? in * s : in * s + std::max<int64_t>(eff - s, 0);
  const int64_t pad = p == Padding::Same ? eff / 2 : 0;
  return (in - 1) * s + eff - 2 * pad + out_pad;
}

// y's shape without batch for an input [H, W, C]: [OH, OW, filters].
inline Shape conv2d_transpose_output_shape(const Shape& hwc, const Conv2dTransposeParams& p) {
  return {conv_transpose_length(hwc[0], p.kh, p.sh, p.dh, p.padding, p.out_pad_h),
          conv_transpose_length(hwc[1], p.kw, p.sw, p.dw, p.padding, p.out_pad_w), p.filters};
}

// The convolution this one transposes: from y [OH, OW, filters] to x [H, W, C] with the same
// window and padding (TensorFlow's conv2d_transpose is that convolution's input gradient), no bias.
// Its HWIO weights [kh, kw, filters, C] are Keras's Conv2DTranspose kernel as stored.
inline Conv2dParams conv2d_transpose_conv(const Conv2dTransposeParams& p, int64_t in_channels) {
  Conv2dParams c = p;
  c.filters = in_channels;
  c.bias = false;
  return c;
}

// Whether the convolution maps the output shape back onto the input's (false for an
// output_padding of a stride or more: the output would have rows no input position reaches).
inline bool conv2d_transpose_fits(const Shape& hwc, const Conv2dTransposeParams& p) {
  const Shape out = conv2d_transpose_output_shape(hwc, p);
  if (out[0] <= 0 || out[1] <= 0) return false;
  const Shape back = conv2d_output_shape(out, conv2d_transpose_conv(p, hwc[2]));
  return back[0] == hwc[0] && back[1] == hwc[1];
}

// The same on every backend: forward is the convolution's backward_data (then the bias), backward
// its forward (dx), its weight gradient with the roles of x and dy swapped (dw) and the column sums
// of dy (db). Activations x, y, dy, dx of one float type; w [kh, kw, filters, C], b, dw, db f32.
class Conv2dTranspose {
 public:
  Conv2dTranspose(OpContext& ctx, const Conv2dTransposeParams& p, int64_t in_channels);

  // x [N, H, W, C] -> y [N, OH, OW, filters] (conv2d_transpose_output_shape), b undefined without bias.
  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
  // dw, db (with bias) overwritten; dx overwritten, or undefined when not needed.
  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db);

 private:
  void check(const Tensor& x, const Tensor& y, const char* yname) const;

  const Conv2dTransposeParams p_;
  const int64_t cin_;
  shape_checks::Checks ck_;
  std::unique_ptr<Conv2dKernel> conv_;
  std::unique_ptr<BiasKernel> bias_;  // where p_.bias
};

}  // namespace trainer
