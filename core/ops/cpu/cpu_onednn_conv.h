// oneDNN convolution shared by the CPU conv2d and depthwise conv2d kernels: per-shape plans, fp32 or bf16, fwd and bwd.
#pragma once
#include <memory>
#include <string>

#include "core/ops/conv2d.h"
#include "core/ops/cpu/cpu_conv_wgrad.h"
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
};

// Forward and backward of one convolution on NHWC activations. Plans (descriptors, primitives,
// reorders and reordered weights) are cached per input shape and type; the backward parts are
// created on first use (evaluation shapes never need them). Arguments are checked by the op
// header (conv2d.h); only f16, which these primitives do not take, is refused here.
//
// The activations' type is the compute type, whatever the context's precision. f32 x: a plain
// fp32 convolution. bf16 x (mixed precision, as PyTorch's CPU autocast): x, y, dy and dx are bf16
// and the primitives read and write the caller's buffers directly, with no conversion; the f32
// master weights become bf16 in the reorder into the primitive's blocked layout (made in fp32
// too), the primitives accumulate in f32, and dw and db are written in f32. The op header checks
// that y, dy and dx have x's type and that w, b, dw and db are f32. A plain convolution's dw and db
// come from ConvWgrad where the CPU has AVX-512 (f32) or AVX512_BF16 (bf16): oneDNN 2.6's own
// kernels for them are the slowest part of a step.
class OnednnConv {
 public:
  OnednnConv(CpuContext& c, const OnednnConvConfig& cfg) : c_(c), cfg_(cfg) {}

  // Whether a bf16 forward runs widened to f32: oneDNN 2.6's brgemm AMX forward kernel
  // (brg:avx512_core_amx) places its tile scratch inside its input copy when the stride exceeds
  // the window along the height (uxlfoundation/oneDNN#5494, fixed in 3.13): silently wrong outputs
  // (found by tests/unit/ops/fuzz_conv_test.cpp on an AMX Xeon: a 1x2 window at stride 3, a 1x3 at
  // stride 2). `impl`: the bf16 primitive's implementation name; the width, and depthwise windows
  // (none seen wrong), are included to be safe.
  // TRAINER_CONV_BF16_FWD=f32 widens every bf16 forward (the tests' way to check the widened path
  // on CPUs without AMX).
  static bool forward_widened(const std::string& impl, const OnednnConvConfig& cfg);

  // y = conv(x, w) (+ b); nothing to do when the output is empty.
  void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
  // dw (and db when the config has a bias, dx when defined) from dy; all zero when the output is
  // empty. dw undefined (a config without bias): dx alone, x read for its shape and type only. add_dx (a plain 1x1 convolution at stride 1 only): dx += the input gradient, computed as
  // the forward 1x1 convolution of dy with the transposed weights and a sum post-op.
  void backward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                Tensor& db, bool add_dx = false);

 private:
  struct Plan {
    // f32, a plain 1x1 window at stride 1 without padding: y and dx are GEMMs over the NHWC rows
    // (cpu::linear_forward_f32, cpu::sgemm) on the user's HWIO weights, [IC, OC] row-major, with no
    // reorder. Cold from memory, as in a step, oneDNN 2.6's 1x1 convolution forward and
    // backward-data kernels were the slower ones on every MiniGoogLeNet shape (see gemm_1x1_preferred).
    bool gemm_1x1 = false;
    dnnl::memory::desc src_md, dst_md;      // x (and dx), y (and dy): NHWC in the compute type
    dnnl::memory::desc bias_md, user_w_md;  // f32 in either type
    dnnl::memory::dims wdims, strides, dilates, pad_l, pad_r;

    dnnl::convolution_forward::primitive_desc fwd_pd;
    dnnl::convolution_forward fwd;
    dnnl::reorder w_to_fwd;  // empty when the primitive takes the user's layout as is
    Tensor w_fwd;
    // bf16 on a primitive that oneDNN 2.6's AMX forward bug hits (forward_widened): x widened to
    // f32 (exactly), the f32 primitive `wide_fwd` on the f32 weights, y rounded to bf16 once.
    bool widen_fwd = false;
    dnnl::convolution_forward wide_fwd;
    dnnl::reorder w_to_wide;
    Tensor w_wide;

    bool have_bwd_data = false;
    bool widen_bwd_data = false;  // bf16 strided 1x1, odd filters: f32 primitive on widened dy (make_bwd_data)
    dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
    dnnl::convolution_backward_data bwd_data;
    dnnl::reorder w_to_bwd;
    Tensor w_bwd;

    // bf16, a plain 1x1 window at stride 1 without padding and an odd number of output channels:
    // oneDNN 2.6.3's backward-data kernel for it (jit_bf16_1x1:avx512_core_bf16) returns a wrong
    // input gradient (see make_bwd_data), so dx is zeroed and the bwd_add primitive adds into it.
    bool dx_by_add = false;
    bool have_bwd_add = false;  // dx += conv1x1(dy, w^T): a forward primitive with a sum post-op
    dnnl::memory::desc add_user_w_md;  // the user's HWIO [1, 1, IC, OC] seen as {IC, OC, 1, 1} (oihw)
    dnnl::convolution_forward::primitive_desc bwd_add_pd;
    dnnl::convolution_forward bwd_add;
    dnnl::reorder w_to_add;
    Tensor w_add;

    bool have_bwd_weights = false;
    std::unique_ptr<ConvWgrad> own_bwd_w;  // plain convolutions where ConvWgrad::available
    // Strided 1x1 windows with few input channels, where oneDNN 2.7's kernel is wrong (see
    // make_bwd_weights): the input rows the window reads and, in bf16, dy widened to f32.
    bool sampled_1x1 = false;
    Tensor sampled;
    // bf16 weight gradients by oneDNN (depthwise; plain ones on the reference path or without
    // AVX512_BF16): x and dy widened to f32 (exactly), oneDNN's f32 primitive (make_bwd_weights).
    bool widen_bwd_w = false;
    // The f32 twins of the activations for the widened primitives (make_wide).
    dnnl::memory::desc src32_md, dst32_md;
    Tensor x32, dx32, dy32;  // dx32: widen_bwd_data only; dy32 also holds y32 in a widened forward
    dnnl::convolution_forward::primitive_desc wide_fwd_pd;
    dnnl::convolution_backward_weights::primitive_desc bwd_w_pd;
    dnnl::convolution_backward_weights bwd_w;
    dnnl::reorder dw_to_user;
    Tensor dw_buf;
  };

  Plan& plan(const Tensor& x, const ConvGeometry& g);
  Plan make_plan(const ConvGeometry& g, DType compute);
  void make_bwd_data(Plan& pl, const ConvGeometry& g);
  void make_wide(Plan& pl, const ConvGeometry& g);
  void make_bwd_add(Plan& pl);
  void make_bwd_weights(Plan& pl, const ConvGeometry& g);
  void sampled_1x1_wgrad(Plan& pl, const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db);
  dnnl::memory weights(const dnnl::memory::desc& user_md, const Tensor& w, const dnnl::reorder& r, Tensor& buf,
                       const dnnl::memory::desc& md);

  CpuContext& c_;
  OnednnConvConfig cfg_;
  ShapeCache<Plan> cache_;
};

}  // namespace trainer::cpu
