// CPU conv2d: oneDNN convolution forward/backward on f32 or bf16 NHWC activations; f32 HWIO weights reordered for it.
#include "core/ops/conv2d.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_onednn_conv.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer {
namespace {

class CpuConv2d final : public Conv2dKernel {
 public:
  CpuConv2d(OpContext& ctx, const Conv2dParams& p)
      : Conv2dKernel(ctx, p), conv_(cpu_context(ctx), config(p)), add_dx_(ctx.fast_paths().has(FastPath::AddDx)) {}
  // A 1x1 window at stride 1: the input gradient is a forward 1x1 convolution of dy, which oneDNN
  // runs with a sum post-op (its backward-data primitive cannot add). With the add_dx fast path
  // off, the executor sums the input gradients written alone instead.
  bool adds_dx() const override { return add_dx_ && p_.kh == 1 && p_.kw == 1 && p_.sh == 1 && p_.sw == 1; }

 private:
  // Activations (x, y, dy, dx) are all f32 or all bf16, which decides the compute type (see
  // OnednnConv); weights, bias and their gradients are f32 either way.
  void forward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    conv_.forward(g, x, w, b, y);
  }
  void backward_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db) override {
    conv_.backward(g, x, w, dy, dx, dw, db, false);
  }
  void backward_add_impl(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                         Tensor& dw, Tensor& db) override {
    conv_.backward(g, x, w, dy, dx, dw, db, true);
  }

  // Weights dims {OC, IC, kh, kw}, given in Keras' HWIO layout.
  static cpu::OnednnConvConfig config(const Conv2dParams& p) {
    return {false, dnnl::memory::format_tag::hwio, p.kh, p.kw, p.sh, p.sw, p.dh, p.dw, p.bias};
  }

  cpu::OnednnConv conv_;
  bool add_dx_;
};

static RegisterKernel<Conv2dKernel, CpuConv2d> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
