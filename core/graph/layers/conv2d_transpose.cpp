// conv2d_transpose layer (Keras Conv2DTranspose): filters, kernel, strides, padding, output_padding, dilation, bias; the op runs conv2d's kernels backwards.
#include <fmt/format.h>

#include <memory>
#include <utility>

#include "core/graph/layers/common.h"
#include "core/ops/conv2d_transpose.h"

namespace trainer {
namespace {

// Keras's output_padding: absent or null (None), an int, or [rows, columns]; each at least 0 and
// below its stride (as Keras requires).
std::pair<int, int> read_output_padding(cfg::MapReader& r, int sh, int sw) {
  const cfg::Node n = r.optional("output_padding");
  if (!n.defined() || (n.is_scalar() && (n.scalar() == "null" || n.scalar() == "~"))) return {-1, -1};
  const std::pair<int, int> v = r.get_pair("output_padding", std::pair{-1, -1}, 0);
  if (v.first >= sh || v.second >= sw)
    n.fail(fmt::format("'{}' must be less than the strides {}x{} (as in Keras), not {}x{}", n.path(), sh, sw, v.first,
                       v.second));
  return v;
}

class Conv2dTransposeLayer final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Conv2dTransposeLayer)
  explicit Conv2dTransposeLayer(cfg::MapReader& r) {
    p_.filters = r.get_int("filters", std::nullopt, 1, 1 << 20);
    std::tie(p_.kh, p_.kw) = r.get_pair("kernel", std::nullopt);
    std::tie(p_.sh, p_.sw) = r.get_pair("strides", std::pair{1, 1});
    std::tie(p_.dh, p_.dw) = r.get_pair("dilation", std::pair{1, 1});
    p_.padding = read_padding(r, "valid");
    std::tie(p_.out_pad_h, p_.out_pad_w) = read_output_padding(r, p_.sh, p_.sw);
    p_.bias = r.get<bool>("use_bias", true);
    kernel_init_ = read_initializer(r, "kernel_initializer", "glorot_uniform");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
    if ((p_.sh > 1 || p_.sw > 1) && (p_.dh > 1 || p_.dw > 1))
      r.node().fail("conv2d_transpose cannot combine strides > 1 with dilation > 1 (as in Keras)");
  }

  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 3)
      spec().fail(fmt::format("conv2d_transpose '{}' needs an image input (H, W, C), got {}", name(), x.str()));
    cin_ = x[2];
    in_hw_ = x[0] * x[1];
    if (!conv2d_transpose_fits(x, p_))  // an output_padding that leaves no row (Keras's even kernel, 'same', 0)
      spec().fail(fmt::format("conv2d_transpose '{}': an output_padding of {}x{} gives a {}x{} output that the {}x{} "
                              "kernel's convolution does not map back onto its {}x{} input",
                              name(), p_.out_pad_h, p_.out_pad_w, conv2d_transpose_output_shape(x, p_)[0],
                              conv2d_transpose_output_shape(x, p_)[1], p_.kh, p_.kw, x[0], x[1]));
    out_ = conv2d_transpose_output_shape(x, p_);
    return out_;
  }

  // Keras's kernel [kh, kw, filters, C] and its fans (compute_fans: the last two axes).
  std::vector<ParamSpec> params() const override {
    const int64_t rf = int64_t(p_.kh) * p_.kw;
    std::vector<ParamSpec> ps{
        {"kernel", Shape{p_.kh, p_.kw, p_.filters, cin_}, kernel_init_, true, rf * p_.filters, rf * cin_}};
    if (p_.bias) ps.push_back({"bias", Shape{p_.filters}, bias_init_, true});
    return ps;
  }

  // Every input element meets every tap and filter once.
  int64_t flops() const override { return 2 * in_hw_ * cin_ * p_.kh * p_.kw * p_.filters; }
  LayerConfig describe() const override {
    LayerConfig c;
    describe_window(c, "kernel", p_.kh, p_.kw, p_.sh, p_.sw, p_.dh, p_.dw, p_.padding);
    return c.put_int("filters", p_.filters)
        .put_int("use_bias", p_.bias)
        .put_int("output_padding_h", p_.out_pad_h)
        .put_int("output_padding_w", p_.out_pad_w);
  }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Low; }
  bool output_reusable() const override { return true; }  // backward never reads y

  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    op_ = std::make_unique<Conv2dTranspose>(ctx, p_, cin_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    op_->forward(*x[0], params_[0], p_.bias ? params_[1] : Tensor(), y);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = p_.bias ? grads_[1] : Tensor();
    op_->backward(*x[0], params_[0], dy, *dx[0], grads_[0], db);
  }

 private:
  Conv2dTransposeParams p_;
  Initializer kernel_init_, bias_init_;
  int64_t cin_ = 0, in_hw_ = 0;
  Shape out_;
  KernelSlot<Conv2dTranspose> op_;  // made at bind (a copy of the layer starts without)
};

RegisterLayer<Conv2dTransposeLayer> reg("conv2d_transpose", "Conv2DTranspose", ActivationKey::Yes);

}  // namespace
}  // namespace trainer
