// Conv2d transpose op: Keras's Conv2DTranspose composed from the device's conv2d (run backwards) and bias_add kernels.
#include "core/ops/conv2d_transpose.h"

namespace trainer {

Conv2dTranspose::Conv2dTranspose(OpContext& ctx, const Conv2dTransposeParams& p, int64_t in_channels)
    : p_(p), cin_(in_channels), ck_("conv2d_transpose", ctx.device()) {
  if (p.filters <= 0) ck_.fail("filters must be positive, got ", p.filters);
  if (in_channels <= 0) ck_.fail("the input must have channels, got ", in_channels);
  check_conv_window(ck_, p.kh, p.kw, p.sh, p.sw, p.dh, p.dw);
  conv_ = make_kernel<Conv2dKernel>(ctx, conv2d_transpose_conv(p, in_channels));
  if (p.bias) bias_ = make_kernel<BiasKernel>(ctx, BiasParams{});
}

void Conv2dTranspose::check(const Tensor& x, const Tensor& y, const char* yname) const {
  ck_.floating("x", x);
  ck_.has_rank("x", x, 4);
  if (x.dim(3) != cin_) ck_.fail("x has ", x.dim(3), " channels, expected ", cin_);
  const Shape hwc{x.dim(1), x.dim(2), cin_};
  if (!conv2d_transpose_fits(hwc, p_))
    ck_.fail("an output_padding of ", p_.out_pad_h, "x", p_.out_pad_w, " does not fit strides ", p_.sh, "x", p_.sw);
  const Shape o = conv2d_transpose_output_shape(hwc, p_);
  ck_.like(yname, y, x, {x.dim(0), o[0], o[1], o[2]});
}

void Conv2dTranspose::forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  check(x, y, "y");
  if (p_.bias) ck_.shape("b", b, {p_.filters});
  conv_->backward_data(w, x, y);
  if (p_.bias) bias_->forward(y, b);
}

void Conv2dTranspose::backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                               Tensor& db) {
  check(x, dy, "dy");
  if (dx.defined()) ck_.like("dx", dx, x, x.shape());
  if (p_.bias) bias_->backward(dy, db);
  Tensor none_dx, none_db;
  conv_->backward(dy, w, x, none_dx, dw, none_db);  // the convolution's x is our dy, its dy our x
  if (dx.defined()) conv_->forward(dy, w, Tensor(), dx);
}

}  // namespace trainer
