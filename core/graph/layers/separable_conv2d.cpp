// separable_conv2d layer (Keras SeparableConv2D): a depthwise convolution, then a 1x1 pointwise one with the bias, run by the depthwise_conv2d and conv2d kernels.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/conv2d.h"
#include "core/ops/depthwise_conv2d.h"

namespace trainer {
namespace {

// Keras's weights: depthwise_kernel [kh, kw, C, M] (strides, padding and dilation apply here),
// pointwise_kernel [1, 1, C·M, filters], bias [filters]. The depthwise output [N, H', W', C·M] is
// kept between forward and backward in a buffer of the layer's own (grown, never shrunk, as a
// dropout mask), in the input's type; its gradient in a transient one.
class SeparableConv2d final : public Layer {
 public:
  TRAINER_LAYER_CLONE(SeparableConv2d)
  explicit SeparableConv2d(cfg::MapReader& r) {
    pw_.filters = r.get_int("filters", std::nullopt, 1, 1 << 20);
    std::tie(dw_.kh, dw_.kw) = r.get_pair("kernel", std::nullopt);
    std::tie(dw_.sh, dw_.sw) = r.get_pair("strides", std::pair{1, 1});
    std::tie(dw_.dh, dw_.dw) = r.get_pair("dilation", std::pair{1, 1});
    dw_.padding = read_padding(r, "valid");
    dw_.multiplier = int(r.get_int("depth_multiplier", 1, 1, 1 << 16));
    dw_.bias = false;
    pw_.bias = r.get<bool>("use_bias", true);
    depthwise_init_ = read_initializer(r, "depthwise_initializer", "glorot_uniform");
    pointwise_init_ = read_initializer(r, "pointwise_initializer", "glorot_uniform");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
    if ((dw_.sh > 1 || dw_.sw > 1) && (dw_.dh > 1 || dw_.dw > 1))
      r.node().fail("separable_conv2d cannot combine strides > 1 with dilation > 1 (as in Keras)");
  }

  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 3)
      spec().fail(fmt::format("separable_conv2d '{}' needs an image input (H, W, C), got {}", name(), x.str()));
    cin_ = x[2];
    mid_ = depthwise_conv2d_output_shape(x, dw_);
    if (mid_[0] <= 0 || mid_[1] <= 0)
      spec().fail(fmt::format("separable_conv2d '{}': a {}x{} kernel does not fit its {}x{} input with padding '{}'",
                              name(), dw_.kh, dw_.kw, x[0], x[1], padding_name(dw_.padding)));
    out_ = Shape{mid_[0], mid_[1], pw_.filters};
    return out_;
  }

  // Keras's fans (compute_fans) for each kernel as its shape gives them.
  std::vector<ParamSpec> params() const override {
    const int64_t rf = int64_t(dw_.kh) * dw_.kw, cm = cin_ * dw_.multiplier;
    std::vector<ParamSpec> ps{
        {"depthwise_kernel", depthwise_conv2d_weight_shape(cin_, dw_), depthwise_init_, true, rf * cin_, rf * dw_.multiplier},
        {"pointwise_kernel", Shape{1, 1, cm, pw_.filters}, pointwise_init_, true, cm, pw_.filters}};
    if (pw_.bias) ps.push_back({"bias", Shape{pw_.filters}, bias_init_, true});
    return ps;
  }

  int64_t flops() const override { return 2 * mid_.numel() * dw_.kh * dw_.kw + 2 * out_.numel() * mid_[2]; }
  LayerConfig describe() const override {
    LayerConfig c;
    describe_window(c, "kernel", dw_.kh, dw_.kw, dw_.sh, dw_.sw, dw_.dh, dw_.dw, dw_.padding);
    return c.put_int("depth_multiplier", dw_.multiplier).put_int("filters", pw_.filters).put_int("use_bias", pw_.bias);
  }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Low; }
  bool output_reusable() const override { return true; }  // backward reads neither y nor its buffer

  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    depthwise_ = make_kernel<DepthwiseConv2dKernel>(ctx, dw_);
    pointwise_ = make_kernel<Conv2dKernel>(ctx, pw_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    const Tensor& in = *x[0];
    mid_t_ = buffer(mid_mem_, in);
    depthwise_->forward(in, params_[0], Tensor(), mid_t_);
    pointwise_->forward(mid_t_, params_[1], pw_.bias ? params_[2] : Tensor(), y);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor dmid = buffer(transient("separable_conv2d/dmid"), *x[0]), db = pw_.bias ? grads_[2] : Tensor(), none;
    pointwise_->backward(mid_t_, params_[1], dy, dmid, grads_[1], db);
    depthwise_->backward(*x[0], params_[0], dmid, *dx[0], grads_[0], none);
  }

 private:
  // [N, H', W', C·M] of x's type in `s`.
  Tensor buffer(Scratch& s, const Tensor& x) {
    const Shape shape{x.dim(0), mid_[0], mid_[1], mid_[2]};
    return Tensor::view(s.get(ctx(), size_t(shape.numel()) * dtype_size(x.dtype())), shape, x.dtype(), ctx().device());
  }

  DepthwiseConv2dParams dw_;
  Conv2dParams pw_;
  Initializer depthwise_init_, pointwise_init_, bias_init_;
  int64_t cin_ = 0;
  Shape mid_, out_;
  Scratch mid_mem_;
  Tensor mid_t_;  // this step's depthwise output, a view of mid_mem_
  KernelSlot<DepthwiseConv2dKernel> depthwise_;
  KernelSlot<Conv2dKernel> pointwise_;
};

RegisterLayer<SeparableConv2d> reg("separable_conv2d", "SeparableConv2D", ActivationKey::Yes);

}  // namespace
}  // namespace trainer
