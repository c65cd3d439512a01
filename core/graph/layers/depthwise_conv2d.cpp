// depthwise_conv2d layer (Keras DepthwiseConv2D): kernel, strides, padding, depth_multiplier, dilation, bias.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/depthwise_conv2d.h"

namespace trainer {
namespace {

class DepthwiseConv2d final : public KernelBiasLayer<DepthwiseConv2dKernel> {
 public:
  TRAINER_LAYER_CLONE(DepthwiseConv2d)
  explicit DepthwiseConv2d(cfg::MapReader& r) {
    std::tie(p_.kh, p_.kw) = r.get_pair("kernel", std::nullopt);
    std::tie(p_.sh, p_.sw) = r.get_pair("strides", std::pair{1, 1});
    std::tie(p_.dh, p_.dw) = r.get_pair("dilation", std::pair{1, 1});
    p_.padding = read_padding(r, "valid");
    p_.multiplier = int(r.get_int("depth_multiplier", 1, 1, 1 << 16));
    p_.bias = r.get<bool>("use_bias", true);
    init_ = read_initializer(r, "depthwise_initializer", "glorot_uniform");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
    if ((p_.sh > 1 || p_.sw > 1) && (p_.dh > 1 || p_.dw > 1))
      r.node().fail("depthwise_conv2d cannot combine strides > 1 with dilation > 1 (as in Keras)");
  }

  MixedPrecision mixed_precision() const override { return MixedPrecision::Low; }
  // A zero_pad2d before 'valid' windows: the zeros taken into the windows (pad_fold).
  bool absorb_padding(const std::array<int, 4>& p) override {
    if (p_.padding != Padding::Valid) return false;
    p_.pad_top += p[0], p_.pad_bottom += p[1], p_.pad_left += p[2], p_.pad_right += p[3];
    return true;
  }
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 3)
      spec().fail(fmt::format("depthwise_conv2d '{}' needs an image input (H, W, C), got {}", name(), x.str()));
    cin_ = x[2];
    out_ = depthwise_conv2d_output_shape(x, p_);
    if (out_[0] <= 0 || out_[1] <= 0)
      spec().fail(fmt::format("depthwise_conv2d '{}': a {}x{} kernel does not fit its {}x{} input with padding '{}'",
                              name(), p_.kh, p_.kw, x[0], x[1], padding_name(p_.padding)));
    return out_;
  }

  // Keras' fans for a 4-D kernel [kh, kw, C, M] (initializers._compute_fans): the receptive field
  // kh * kw times shape[-2] (C) in, times shape[-1] (M) out — so a depthwise kernel's Glorot
  // limit counts every input channel although each filter sees one. Kept as Keras has it, so that
  // initial weights are distributed as in tf.keras.
  std::vector<ParamSpec> params() const override {
    int64_t rf = int64_t(p_.kh) * p_.kw;
    std::vector<ParamSpec> ps{
        {"depthwise_kernel", depthwise_conv2d_weight_shape(cin_, p_), init_, true, rf * cin_, rf * p_.multiplier}};
    if (p_.bias) ps.push_back({"bias", Shape{cin_ * p_.multiplier}, bias_init_, true});
    return ps;
  }

  // Each output value is kh * kw multiply-adds (one input channel).
  int64_t flops() const override { return 2 * out_.numel() * p_.kh * p_.kw; }
  LayerConfig describe() const override {
    LayerConfig c;
    describe_window(c, "kernel", p_.kh, p_.kw, p_.sh, p_.sw, p_.dh, p_.dw, p_.padding);
    if (p_.pad_top + p_.pad_bottom + p_.pad_left + p_.pad_right > 0)  // a zero_pad2d folded in
      c.put_int("pad_top", p_.pad_top).put_int("pad_bottom", p_.pad_bottom).put_int("pad_left", p_.pad_left).put_int("pad_right", p_.pad_right);
    return c.put_int("depth_multiplier", p_.multiplier).put_int("use_bias", p_.bias);
  }

 private:
  Initializer init_, bias_init_;
  int64_t cin_ = 0;
  Shape out_;
};

RegisterLayer<DepthwiseConv2d> reg("depthwise_conv2d", "DepthwiseConv2D", ActivationKey::Yes);

}  // namespace
}  // namespace trainer
