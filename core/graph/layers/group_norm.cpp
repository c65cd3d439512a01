// group_norm layer (Keras GroupNormalization over the last axis): groups 32, epsilon 1e-3, center (beta) and scale (gamma).
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/group_norm.h"

namespace trainer {
namespace {

// Keras's GroupNormalization(groups=32, axis=-1, epsilon=1e-3): the channels of each sample cut
// into `groups` groups, each normalised over its channels and every position (groups = C: instance
// norm; groups = 1: one layer norm over the whole sample), then gamma and beta per channel.
class GroupNorm final : public Layer {
 public:
  TRAINER_LAYER_CLONE(GroupNorm)
  // Backward reads x, dy and the forward's statistics, never y. Under mixed precision it computes
  // in fp32 (F32, the default), as PyTorch's autocast runs group_norm.
  bool output_reusable() const override { return true; }
  explicit GroupNorm(cfg::MapReader& r) {
    groups_node_ = r.optional("groups");
    p_.groups = r.get_int("groups", 32, 1, 1 << 20);
    p_.epsilon = float(r.get_float("epsilon", 1e-3, 1e-12, 1.0));
    p_.center = r.get<bool>("center", true);
    p_.scale = r.get<bool>("scale", true);
    gamma_init_ = read_initializer(r, "gamma_initializer", "ones");
    beta_init_ = read_initializer(r, "beta_initializer", "zeros");
    cfg::Node axis = r.optional("axis");
    if (axis.defined() && axis.as<int>() != -1)
      axis.fail("group_norm groups the channels (last) axis: axis must be -1 (Keras's default)");
  }

  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() < 1) spec().fail(fmt::format("group_norm '{}' needs an input with at least one axis", name()));
    C_ = in[0].back();
    if (C_ % p_.groups != 0) {
      const std::string msg = fmt::format("group_norm '{}': {} channels cannot be split into {} groups (the channels "
                                          "must be a multiple of groups, as Keras requires)",
                                          name(), C_, p_.groups);
      if (groups_node_.defined()) groups_node_.fail(msg);
      spec().fail(msg + "; Keras's default is 32 groups");
    }
    elems_ = in[0].numel();
    return in[0];
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> ps;
    if (p_.scale) ps.push_back({"gamma", Shape{C_}, gamma_init_, true});
    if (p_.center) ps.push_back({"beta", Shape{C_}, beta_init_, true});
    return ps;
  }
  // The statistics, the normalisation and the affine map: about 8 operations per element.
  int64_t flops() const override { return 8 * elems_; }
  LayerConfig describe() const override {
    return LayerConfig()
        .put_int("groups", p_.groups)
        .put_real("epsilon", p_.epsilon)
        .put_int("center", p_.center)
        .put_int("scale", p_.scale);
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<GroupNormKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    k_->forward(*x[0], gamma(params_), beta(params_), y, stats_.at(ctx(), {x[0]->dim(0), p_.groups, 3}));
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor dgamma = gamma(grads_), dbeta = beta(grads_);
    k_->backward(*x[0], gamma(params_), dy, stats_.get(), *dx[0], dgamma, dbeta);
  }

 private:
  // The parameters (or their gradients, in the same order): gamma first when present (params()).
  Tensor gamma(const std::vector<Tensor>& t) const { return p_.scale && !t.empty() ? t[0] : Tensor(); }
  Tensor beta(const std::vector<Tensor>& t) const {
    const size_t i = p_.scale ? 1 : 0;
    return p_.center && t.size() > i ? t[i] : Tensor();
  }

  cfg::Node groups_node_;
  Initializer gamma_init_, beta_init_;
  GroupNormParams p_;
  int64_t C_ = 0, elems_ = 0;
  HeldTensor stats_;  // the last forward's statistics, for its backward
  KernelSlot<GroupNormKernel> k_;
};

RegisterLayer<GroupNorm> reg("group_norm", "GroupNormalization");

}  // namespace
}  // namespace trainer
