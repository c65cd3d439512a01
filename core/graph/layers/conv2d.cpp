// conv2d layer (Keras Conv2D): filters, kernel, strides, padding, dilation, bias.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/conv2d.h"

namespace trainer {
namespace {

class Conv2d final : public KernelBiasLayer<Conv2dKernel> {
 public:
  TRAINER_LAYER_CLONE(Conv2d)
  explicit Conv2d(cfg::MapReader& r) {
    p_.filters = r.get_int("filters", std::nullopt, 1, 1 << 20);
    std::tie(p_.kh, p_.kw) = r.get_pair("kernel", std::nullopt);
    std::tie(p_.sh, p_.sw) = r.get_pair("strides", std::pair{1, 1});
    std::tie(p_.dh, p_.dw) = r.get_pair("dilation", std::pair{1, 1});
    p_.padding = read_padding(r, "valid");
    p_.bias = r.get<bool>("use_bias", true);
    kernel_init_ = read_initializer(r, "kernel_initializer", "glorot_uniform");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
    if ((p_.sh > 1 || p_.sw > 1) && (p_.dh > 1 || p_.dw > 1))
      r.node().fail("conv2d cannot combine strides > 1 with dilation > 1 (as in Keras)");
  }

  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 3) spec().fail(fmt::format("conv2d '{}' needs an image input (H, W, C), got {}", name(), x.str()));
    cin_ = x[2];
    out_ = conv2d_output_shape(x, p_);
    if (out_[0] <= 0 || out_[1] <= 0)
      spec().fail(fmt::format("conv2d '{}': a {}x{} kernel does not fit its {}x{} input with padding '{}'", name(), p_.kh,
                              p_.kw, x[0], x[1], padding_name(p_.padding)));
    return out_;
  }

  std::vector<ParamSpec> params() const override {
    int64_t rf = int64_t(p_.kh) * p_.kw;
    std::vector<ParamSpec> ps{{"kernel", conv2d_weight_shape(cin_, p_), kernel_init_, true, rf * cin_, rf * p_.filters}};
    if (p_.bias) ps.push_back({"bias", Shape{p_.filters}, bias_init_, true});
    return ps;
  }

  int64_t flops() const override { return 2 * out_.numel() * p_.kh * p_.kw * cin_; }
  LayerConfig describe() const override {
    LayerConfig c;
    describe_window(c, "kernel", p_.kh, p_.kw, p_.sh, p_.sw, p_.dh, p_.dw, p_.padding);
    return c.put_int("filters", p_.filters).put_int("use_bias", p_.bias);
  }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Low; }
  // The input gradient added into dx where the kernel can (a 1x1 window at stride 1 on the CPU).
  bool can_add_input_grad(int k) const override { return k == 0 && k_ && k_->adds_dx(); }
  void add_input_grad(int, bool on) override { add_dx_ = on; }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = p_.bias ? grads_[1] : Tensor();
    k_->backward(*x[0], params_[0], dy, *dx[0], grads_[0], db, add_dx_);
  }

 private:
  bool add_dx_ = false;
  Initializer kernel_init_, bias_init_;
  int64_t cin_ = 0;
  Shape out_;
};

RegisterLayer<Conv2d> reg("conv2d", "Conv2D", ActivationKey::Yes);

}  // namespace
}  // namespace trainer
