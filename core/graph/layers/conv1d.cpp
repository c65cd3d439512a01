// conv1d layer (Keras Conv1D) over a sequence [steps, channels]: filters, kernel, strides, dilation, padding valid|same|causal, bias; run as a one-row conv2d.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/conv2d.h"

namespace trainer {
namespace {

// The sequence [N, T, C] is the image [N, 1, T, C] and Keras's kernel [k, in, filters] the conv2d
// kernel [1, k, in, filters] (the same memory): the conv2d kernels of every backend run it, their
// fast paths included. `causal` (WaveNet's; Keras's padding="causal") pads (k - 1)·dilation zeros
// before the steps and none after, so output step t sees input steps <= t (on the GPU, zeros put
// before the steps in a padded copy: cuDNN pads symmetrically, cuda_conv2d.cu).
class Conv1d final : public KernelBiasLayer<Conv2dKernel> {
 public:
  TRAINER_LAYER_CLONE(Conv1d)
  explicit Conv1d(cfg::MapReader& r) {
    p_.filters = r.get_int("filters", std::nullopt, 1, 1 << 20);
    p_.kw = int(r.get_int("kernel", std::nullopt, 1, 1 << 16));
    p_.sw = int(r.get_int("strides", 1, 1, 1 << 16));
    p_.dw = int(r.get_int("dilation", 1, 1, 1 << 16));
    const std::string padding = r.get_choice("padding", {"valid", "same", "causal"}, "valid");
    causal_ = padding == "causal";
    p_.padding = padding == "same" ? Padding::Same : Padding::Valid;
    if (causal_) p_.pad_left = (p_.kw - 1) * p_.dw;
    p_.bias = r.get<bool>("use_bias", true);
    kernel_init_ = read_initializer(r, "kernel_initializer", "glorot_uniform");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
    if (p_.sw > 1 && p_.dw > 1) r.node().fail("conv1d cannot combine strides > 1 with dilation > 1 (as in Keras)");
  }

  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 2)
      spec().fail(fmt::format("conv1d '{}' needs a sequence input (steps, channels), got {}", name(), x.str()));
    steps_ = x[0];
    cin_ = x[1];
    const Shape out = conv2d_output_shape(Shape{1, x[0], x[1]}, p_);
    if (out[1] <= 0)
      spec().fail(fmt::format("conv1d '{}': a kernel of {} (dilation {}) does not fit its {} steps with padding '{}'", name(),
                              p_.kw, p_.dw, x[0], causal_ ? "causal" : padding_name(p_.padding)));
    out_ = Shape{out[1], out[2]};
    return out_;
  }

  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> ps{{"kernel", Shape{p_.kw, cin_, p_.filters}, kernel_init_, true, p_.kw * cin_, p_.kw * p_.filters}};
    if (p_.bias) ps.push_back({"bias", Shape{p_.filters}, bias_init_, true});
    return ps;
  }

  int64_t flops() const override { return 2 * out_.numel() * p_.kw * cin_; }
  LayerConfig describe() const override {
    LayerConfig c;
    c.put_int("kernel", p_.kw).put_int("strides", p_.sw).put_int("dilation", p_.dw);
    c.put_text("padding", causal_ ? "causal" : padding_name(p_.padding));
    const ConvGeometry g = conv2d_geometry(Shape{1, 1, steps_, cin_}, p_);
    c.put_int("pad_before", g.pl).put_int("pad_after", g.pr);
    return c.put_int("filters", p_.filters).put_int("use_bias", p_.bias);
  }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Low; }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    Tensor yi = image(y);
    k_->forward(image(*x[0]), weight(params_[0]), p_.bias ? params_[1] : Tensor(), yi);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = p_.bias ? grads_[1] : Tensor();
    Tensor dxi = image(*dx[0]), dw = weight(grads_[0]);
    k_->backward(image(*x[0]), weight(params_[0]), image(dy), dxi, dw, db);
  }

 private:
  // [N, T, C] as [N, 1, T, C]; the kernel [k, in, f] as [1, k, in, f].
  static Tensor image(const Tensor& t) { return t.reshape(Shape{t.shape()[0], 1, t.shape()[1], t.shape()[2]}); }
  Tensor weight(const Tensor& w) const { return w.reshape(Shape{1, p_.kw, cin_, p_.filters}); }

  bool causal_ = false;
  Initializer kernel_init_, bias_init_;
  int64_t steps_ = 0, cin_ = 0;
  Shape out_;
};

RegisterLayer<Conv1d> reg("conv1d", "Conv1D", ActivationKey::Yes);

}  // namespace
}  // namespace trainer
