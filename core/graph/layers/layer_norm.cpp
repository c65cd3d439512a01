// layer_norm layer (Keras LayerNormalization over the last axis): epsilon 1e-3, center (beta) and scale (gamma).
#include "core/graph/layers/common.h"
#include "core/ops/layer_norm.h"

namespace trainer {
namespace {

class LayerNorm final : public Layer {
 public:
  TRAINER_LAYER_CLONE(LayerNorm)
  // Backward reads x and dy, never y. Under mixed precision it computes in fp32 (F32, the
  // default), as PyTorch's autocast runs layer_norm: its statistics are a row's sums.
  bool output_reusable() const override { return true; }
  explicit LayerNorm(cfg::MapReader& r) {
    p_.epsilon = float(r.get_float("epsilon", 1e-3, 1e-12, 1.0));
    p_.center = r.get<bool>("center", true);
    p_.scale = r.get<bool>("scale", true);
    gamma_init_ = read_initializer(r, "gamma_initializer", "ones");
    beta_init_ = read_initializer(r, "beta_initializer", "zeros");
    r.allow({"axis"});
    cfg::Node axis = r.optional("axis");
    if (axis.defined() && axis.as<int>() != -1)
      axis.fail("layer_norm normalises the last axis: axis must be -1 (Keras's default)");
  }

  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() < 1) spec().fail("layer_norm needs an input with at least one axis");
    p_.features = in[0].back();
    elems_ = in[0].numel();
    return in[0];
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> ps;
    if (p_.scale) ps.push_back({"gamma", Shape{p_.features}, gamma_init_, true});
    if (p_.center) ps.push_back({"beta", Shape{p_.features}, beta_init_, true});
    return ps;
  }
  // The statistics, the normalisation and the affine map: about 8 operations per element.
  int64_t flops() const override { return 8 * elems_; }
  LayerConfig describe() const override {
    return LayerConfig().put_real("epsilon", p_.epsilon).put_int("center", p_.center).put_int("scale", p_.scale);
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<LayerNormKernel>(ctx, p_);
  }
  // The rows' statistics are kept from a training forward for its backward where the backend can
  // (the same floats backward would compute again from x: the CPU's backward took 0.23 ms of
  // gpt_bytes' step per layer norm, a third of it the statistics' two passes in double).
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    Tensor* stats = nullptr;
    if (training && k_->keeps_stats()) stats = &stats_.at(ctx(), {x[0]->numel() / p_.features, 3});
    k_->forward(*x[0], gamma(params_), beta(params_), y, stats);
    kept_ = stats != nullptr;
  }
  // A second consumer of its input (a pre-norm block's residual stream) adds its input gradient in
  // place where the backend can (the add_dx fast path).
  bool can_add_input_grad(int k) const override { return k == 0 && k_ && k_->adds_dx(); }
  void add_input_grad(int, bool on) override { add_dx_ = on; }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor dgamma = gamma(grads_), dbeta = beta(grads_);
    k_->backward(*x[0], gamma(params_), dy, *dx[0], dgamma, dbeta, add_dx_, kept_ ? &stats_.get() : nullptr);
  }

 private:
  Initializer gamma_init_, beta_init_;
  // The parameters (or their gradients, in the same order): gamma first when present (params()).
  Tensor gamma(const std::vector<Tensor>& t) const { return p_.scale ? t[0] : Tensor(); }
  Tensor beta(const std::vector<Tensor>& t) const { return p_.center ? t[p_.scale ? 1 : 0] : Tensor(); }

  LayerNormParams p_;
  int64_t elems_ = 0;
  bool add_dx_ = false;
  bool kept_ = false;  // the last forward kept its statistics in stats_
  HeldTensor stats_;
  KernelSlot<LayerNormKernel> k_;
};

RegisterLayer<LayerNorm> reg("layer_norm", "LayerNormalization");

}  // namespace
}  // namespace trainer
