// Activation layers: `activation` (with `function:` or Keras's `activation:`) and the shorthands relu, relu6, sigmoid, tanh, gelu, silu, leaky_relu, elu.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/activation.h"

namespace trainer {
namespace {

class Activation : public Layer {
 public:
  TRAINER_LAYER_CLONE(Activation)
  explicit Activation(ActKind k, float alpha) {
    p_.kind = k;
    p_.alpha = alpha;
  }
  explicit Activation(ActKind k) : Activation(k, default_alpha(k)) {}
  // `function: relu`, or Keras's own key `activation: relu` (Activation's get_config(); also the
  // `activation:` of a dense or convolution, which parse_model makes a layer of this type reading
  // that layer's mapping).
  explicit Activation(cfg::MapReader& r) {
    std::vector<std::string> names;
    for (const char* const* n = activation_names(); *n; ++n) names.push_back(*n);
    names.push_back("swish");  // Keras's other names for silu and hard_silu
    names.push_back("hard_swish");
    names.push_back("softmax");  // parse_model makes it a softmax layer (never read here)
    const bool keras_key = !r.has("function") && r.has("activation");
    if (r.has("function") && r.has("activation"))
      r.required("activation").fail("an activation layer takes 'function' or 'activation' (Keras's name), not both");
    const std::string f = r.get_choice(keras_key ? "activation" : "function", names);
    if (f == "softmax") r.node().fail("softmax: use {type: softmax}");  // unreachable through parse_model
    p_.kind = *parse_activation(f);
    p_.alpha = default_alpha(p_.kind);  // keras.activations.leaky_relu's and elu's defaults
  }
  Shape infer(const std::vector<Shape>& in) override {
    elems_ = in[0].numel();
    return in[0];
  }
  int64_t flops() const override { return elems_; }
  LayerConfig describe() const override {
    LayerConfig c;
    c.put_text("function", activation_name(p_.kind));
    if (p_.kind == ActKind::LeakyRelu) c.put_real("negative_slope", p_.alpha);
    if (p_.kind == ActKind::Elu) c.put_real("alpha", p_.alpha);
    return c;
  }
  // In place where backward reads only y (backward_reads_y); the others read x, which must stay.
  bool in_place() const override { return !backward_reads_x(p_.kind); }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<ActivationKernel>(ctx, p_);
  }
  std::optional<ActKind> activation() const override { return p_.kind; }
  void set_fused(bool on) override { fused_ = on; }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    if (fused_) return check_fused(*x[0], y);  // the producer wrote act(its output) over y already
    k_->forward(*x[0], y);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]->defined()) return;
    if (fused_) return check_fused(dy, *dx[0]);  // the producer's backward takes dy through it
    // x[0] is y's buffer when the graph runs this layer in place: the kernel reads only y.
    k_->backward(*x[0], y, dy, *dx[0]);
  }

 private:
  // Fused, the layer runs in place: its input and output (gradients too) are one buffer.
  static void check_fused(const Tensor& in, const Tensor& out) {
    if (in.data() != out.data()) throw std::logic_error("a fused activation layer is not running in place");
  }

  ActivationParams p_;
  bool fused_ = false;
  int64_t elems_ = 0;
  KernelSlot<ActivationKernel> k_;
};

template <ActKind K>
struct Fixed final : Activation {
  TRAINER_LAYER_CLONE(Fixed)
  explicit Fixed(cfg::MapReader&) : Activation(K) {}
};

RegisterLayer<Activation> reg("activation", "Activation");
RegisterLayer<Fixed<ActKind::Relu>> reg_relu("relu", "ReLU");
RegisterLayer<Fixed<ActKind::Relu6>> reg_relu6("relu6", "ReLU");
RegisterLayer<Fixed<ActKind::Sigmoid>> reg_sigmoid("sigmoid", "Activation");
RegisterLayer<Fixed<ActKind::Tanh>> reg_tanh("tanh", "Activation");
RegisterLayer<Fixed<ActKind::Silu>> reg_silu("silu", "Activation");

// `gelu` (Keras's keras.activations.gelu as a layer): the exact erf form; `approximate: true` the
// tanh form (Keras's approximate=True, PyTorch's approximate='tanh').
struct Gelu final : Activation {
  TRAINER_LAYER_CLONE(Gelu)
  explicit Gelu(cfg::MapReader& r) : Activation(r.get<bool>("approximate", false) ? ActKind::GeluTanh : ActKind::Gelu) {}
};
RegisterLayer<Gelu> reg_gelu("gelu", "Activation");

// Keras's LeakyReLU(negative_slope=0.3) and ELU(alpha=1.0) layers (their defaults differ from the
// functions': `activation: leaky_relu` has slope 0.2, as keras.activations.leaky_relu). The slope
// must be >= 0, as Keras requires (and as the derivative from y needs).
struct LeakyRelu final : Activation {
  TRAINER_LAYER_CLONE(LeakyRelu)
  explicit LeakyRelu(cfg::MapReader& r)
      : Activation(ActKind::LeakyRelu, float(r.get_float("negative_slope", 0.3, 0.0, 1e6))) {}
};
RegisterLayer<LeakyRelu> reg_leaky("leaky_relu", "LeakyReLU");
struct Elu final : Activation {
  TRAINER_LAYER_CLONE(Elu)
  explicit Elu(cfg::MapReader& r) : Activation(ActKind::Elu, float(r.get_float("alpha", 1.0, -1e6, 1e6))) {}
};
RegisterLayer<Elu> reg_elu("elu", "ELU");

}  // namespace
}  // namespace trainer
