// CPU conv2d: oneDNN convolution forward/backward on f32 or bf16 NHWC activations; f32 HWIO weights reordered for it.
#include "core/ops/conv2d.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_onednn_conv.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer {
namespace {

class CpuConv2d final : public Conv2dKernel {
 public:
  CpuConv2d(OpContext& ctx, const Conv2dParams& p) : p_(p), conv_(cpu_context(ctx), config(p)) {
    if (p.filters <= 0) cpu::fail("conv2d: filters must be positive, got {}", p.filters);
    if (p.kh < 1 || p.kw < 1 || p.sh < 1 || p.sw < 1 || p.dh < 1 || p.dw < 1)
      cpu::fail("conv2d: kernel {}x{}, strides {}x{} and dilation {}x{} must be positive", p.kh, p.kw, p.sh, p.sw, p.dh,
                p.dw);
  }

  // Activations (x, y, dy, dx) are all f32 or all bf16, which decides the compute type (see
  // OnednnConv); weights, bias and their gradients are f32 either way.
  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    ConvGeometry g = check(x, w, b, p_.bias);
    cpu::require_shape("conv2d", "y", y, {g.n, g.oh, g.ow, g.oc}, x.dtype());
    conv_.forward(g, x, w, b, y);
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) override {
    ConvGeometry g = check(x, w, Tensor(), false);
    cpu::require_shape("conv2d", "dy", dy, {g.n, g.oh, g.ow, g.oc}, x.dtype());
    cpu::require_shape("conv2d", "dw", dw, w.shape());
    if (p_.bias) cpu::require_shape("conv2d", "db", db, {g.oc});
    if (dx.defined()) cpu::require_shape("conv2d", "dx", dx, x.shape(), x.dtype());
    conv_.backward(g, x, w, dy, dx, dw, db);
  }

 private:
  // Weights dims {OC, IC, kh, kw}, given in Keras' HWIO layout.
  static cpu::OnednnConvConfig config(const Conv2dParams& p) {
    return {false, dnnl::memory::format_tag::hwio, p.kh, p.kw, p.sh, p.sw, p.dh, p.dw, p.bias};
  }

  ConvGeometry check(const Tensor& x, const Tensor& w, const Tensor& b, bool need_bias) const {
    cpu::require_rank("conv2d", "x", x, 4, cpu::float_dtype("conv2d", "x", x));
    ConvGeometry g = conv2d_geometry(x.shape(), p_);
    cpu::require_shape("conv2d", "w", w, conv2d_weight_shape(g.ic, p_));
    if (need_bias) cpu::require_shape("conv2d", "b", b, {g.oc});
    return g;
  }

  Conv2dParams p_;
  cpu::OnednnConv conv_;
};

static RegisterKernel<Conv2dKernel, CpuConv2d> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
