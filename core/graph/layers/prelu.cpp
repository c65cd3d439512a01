// prelu layer (Keras PReLU): x where x > 0, alpha·x elsewhere, alpha learned per position of a sample, shared along `shared_axes`.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/prelu.h"

namespace trainer {
namespace {

// Keras's PReLU(alpha_initializer="zeros", shared_axes=None): alpha has a sample's shape with 1
// on each shared axis (Keras numbers them from 1, the batch being 0: shared_axes [1, 2] over an
// image [H, W, C] gives alpha [1, 1, C], one slope per channel as PyTorch's nn.PReLU(C)).
class PRelu final : public Layer {
 public:
  TRAINER_LAYER_CLONE(PRelu)
  bool output_reusable() const override { return true; }  // backward reads x, not y
  // Memory-bound: runs in the activations' type, alpha kept in f32.
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  explicit PRelu(cfg::MapReader& r) {
    alpha_init_ = read_initializer(r, "alpha_initializer", "zeros");
    const cfg::Node axes = r.optional("shared_axes");
    if (axes.defined())
      for (const cfg::Node& a : axes.items()) axes_.push_back({a, a.as<int>()});
  }
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() < 1) spec().fail(fmt::format("prelu '{}' needs an input with at least one axis", name()));
    p_.shared.assign(x.rank(), false);
    for (const Axis& a : axes_) {
      if (a.axis < 1 || a.axis > int(x.rank()))
        a.node.fail(fmt::format("prelu '{}': shared axis {} is not an axis of its input {} (Keras numbers them 1 to {}, "
                                "the batch being 0)",
                                name(), a.axis, x.keras_str(), x.rank()));
      if (p_.shared[size_t(a.axis - 1)]) a.node.fail(fmt::format("prelu '{}': shared axis {} given twice", name(), a.axis));
      p_.shared[size_t(a.axis - 1)] = true;
    }
    std::vector<int64_t> alpha(x.rank());
    for (size_t k = 0; k < x.rank(); ++k) alpha[k] = p_.shared[k] ? 1 : x[k];
    alpha_ = Shape(std::move(alpha));
    elems_ = x.numel();
    return x;
  }
  std::vector<ParamSpec> params() const override { return {{"alpha", alpha_, alpha_init_, true}}; }
  int64_t flops() const override { return elems_; }
  LayerConfig describe() const override {
    std::string shared;
    for (size_t k = 0; k < p_.shared.size(); ++k)
      if (p_.shared[k]) shared += (shared.empty() ? "" : ",") + std::to_string(k + 1);
    return LayerConfig().put_text("shared_axes", shared);
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<PReluKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->forward(*x[0], params_[0], y); }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor dalpha = grads_.empty() ? Tensor() : grads_[0];
    k_->backward(*x[0], params_[0], dy, *dx[0], dalpha);
  }

 private:
  struct Axis {
    cfg::Node node;  // for messages at its place in the config
    int axis;
  };
  std::vector<Axis> axes_;
  Initializer alpha_init_;
  Shape alpha_;
  PReluParams p_;
  int64_t elems_ = 0;
  KernelSlot<PReluKernel> k_;
};

RegisterLayer<PRelu> reg("prelu", "PReLU");

}  // namespace
}  // namespace trainer
