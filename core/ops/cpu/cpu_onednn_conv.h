// oneDNN convolution shared by the CPU conv2d and depthwise conv2d kernels: per-shape plans, fp32 or bf16, fwd and bwd.
#pragma once
#include "core/ops/conv2d.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer::cpu {

// What stays fixed for one kernel: the layout of the user's weights, the window and the bias.
struct OnednnConvConfig {
  // False: a plain convolution, weights dims {OC, IC, kh, kw}. True: a depthwise (grouped)
  // convolution with G = IC groups of one input channel and OC / IC output channels each, weights
  // dims {G, OC/G, IC/G = 1, kh, kw}.
  bool depthwise = false;
  dnnl::memory::format_tag user_w_tag = dnnl::memory::format_tag::hwio;  // how the user's weights are laid out
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;                 // dilation as Keras' (1 = dense)
  bool bias = false;
  // Whether the context's bf16 precision applies. Depthwise convolutions stay f32: oneDNN 2.7's
  // bf16 depthwise kernels are slower than its f32 ones here (MobileNetV2, batch 16, 2 threads:
  // 46 against 34 ms per step), and they do few multiply-adds per byte anyway.
  bool bf16_capable = true;
};

// Forward and backward of one convolution on NHWC activations. Plans (descriptors, primitives,
// reorders and reordered weights) are cached per input shape; the backward parts are created on
// first use (evaluation shapes never need them). Arguments are checked by the caller.
//
// Precision follows the context. In bf16 (mixed precision, as PyTorch's CPU autocast) every tensor
// the caller sees stays f32; inside, x, w and dy are converted to bf16 by oneDNN reorders (w
// straight into the primitive's blocked layout, x and dy into per-thread scratch) and the
// primitives accumulate in f32 and write f32 y, dx, dw and db. dy is converted once per backward
// for both backward primitives; x once in forward and once in backward (see source()).
class OnednnConv {
 public:
  OnednnConv(CpuContext& c, const OnednnConvConfig& cfg) : c_(c), cfg_(cfg) {}

  // y = conv(x, w) (+ b); nothing to do when the output is empty.
  void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
  // dw (and db when the config has a bias, dx when defined) from dy; all zero when the output is empty.
  void backward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                Tensor& db);

 private:
  struct Plan {
    ConvGeometry g{};
    dnnl::memory::desc src_md, dst_md, bias_md, user_w_md;  // the caller's f32 tensors
    dnnl::memory::desc src_c_md, dst_c_md;  // x and dy as the primitives read them (bf16 NHWC, or = src_md / dst_md)
    dnnl::memory::dims wdims, strides, dilates, pad_l, pad_r;

    dnnl::convolution_forward::primitive_desc fwd_pd;
    dnnl::convolution_forward fwd;
    dnnl::reorder w_to_fwd;  // empty when the primitive takes the user's layout as is
    Tensor w_fwd;

    bool have_bwd_data = false;
    dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
    dnnl::convolution_backward_data bwd_data;
    dnnl::reorder w_to_bwd;
    Tensor w_bwd;

    bool have_bwd_weights = false;
    dnnl::convolution_backward_weights::primitive_desc bwd_w_pd;
    dnnl::convolution_backward_weights bwd_w;
    dnnl::reorder dw_to_user;
    Tensor dw_buf;

    Bf16Convert x_to_bf16, dy_to_bf16;  // bf16 only: x and dy to src_c_md and dst_c_md
  };

  bool bf16() const { return cfg_.bf16_capable && c_.bf16(); }
  Plan& plan(const Shape& xs, const ConvGeometry& g);
  Plan make_plan(const ConvGeometry& g);
  void make_bwd_data(Plan& pl);
  void make_bwd_weights(Plan& pl);
  dnnl::memory weights(Plan& pl, const Tensor& w, const dnnl::reorder& r, Tensor& buf, const dnnl::memory::desc& md);
  dnnl::memory source(Plan& pl, const Tensor& x);
  dnnl::memory grad(Plan& pl, const Tensor& dy);

  CpuContext& c_;
  OnednnConvConfig cfg_;
  ShapeCache<Plan> cache_;
};

}  // namespace trainer::cpu
