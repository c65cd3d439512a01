// batchnorm layer (Keras BatchNormalization over the channel axis): momentum 0.99, epsilon 1e-3, moving variance of the biased batch variance.
#include "core/graph/layers/common.h"
#include "core/ops/batchnorm.h"

namespace trainer {
namespace {

class BatchNorm final : public Layer {
 public:
  TRAINER_LAYER_CLONE(BatchNorm)
  // Backward never reads y, except that of a fused activation (fuse_activation), which is y's
  // final value: the in-place activation layer leaves it alone.
  bool output_reusable() const override { return true; }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  explicit BatchNorm(cfg::MapReader& r) {
    p_.momentum = float(r.get_float("momentum", 0.99, 0.0, 1.0));
    p_.epsilon = float(r.get_float("epsilon", 1e-3, 1e-12, 1.0));
    // Which batch variance the moving variance averages: Keras 3's biased one, or PyTorch's
    // (and cuDNN's, tf.keras 2's fused kernel's) unbiased one.
    p_.unbiased_moving_variance = r.get_choice("moving_variance", {"biased", "unbiased"}, "biased") == "unbiased";
    gamma_init_ = read_initializer(r, "gamma_initializer", "ones");
    beta_init_ = read_initializer(r, "beta_initializer", "zeros");
    moving_mean_init_ = read_initializer(r, "moving_mean_initializer", "zeros");
    moving_variance_init_ = read_initializer(r, "moving_variance_initializer", "ones");
    r.allow({"axis"});  // channels are always the last axis (NHWC); Keras' axis=-1
    cfg::Node axis = r.optional("axis");
    if (axis.defined() && axis.as<int>() != -1 && axis.as<int>() != 3)
      axis.fail("batchnorm normalises the channel axis of NHWC activations: axis must be -1 (or 3)");
  }

  Shape infer(const std::vector<Shape>& in) override {
    c_ = in[0].back();
    elems_ = in[0].numel();
    return in[0];
  }

  std::vector<ParamSpec> params() const override {
    return {{"gamma", Shape{c_}, gamma_init_, true},
            {"beta", Shape{c_}, beta_init_, true},
            {"moving_mean", Shape{c_}, moving_mean_init_, false},
            {"moving_variance", Shape{c_}, moving_variance_init_, false}};
  }

  int64_t flops() const override { return 2 * elems_; }
  // Inference uses the moving statistics: y = gamma * (x - moving_mean) / sqrt(moving_variance + epsilon) + beta.
  LayerConfig describe() const override {
    return LayerConfig().put_real("epsilon", p_.epsilon).put_real("momentum", p_.momentum);
  }

  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<BatchNormKernel>(ctx, p_);
    mean_ = ctx.zeros(Shape{c_});
    invstd_ = ctx.zeros(Shape{c_});
    var_ = ctx.zeros(Shape{c_});
    stats_ = ctx.zeros(Shape{2 * c_ + 1});
    grad_sums_ = ctx.zeros(Shape{2 * c_});
  }

  void set_sync(StatsSync* sync) override {
    sync_ = sync && sync->replicas() > 1 ? sync : nullptr;
    if (sync_ && p_.activation != ActKind::Linear) throw std::logic_error("batchnorm: set_sync after an activation was fused");
  }

  // ReLU or ReLU6 where the kernel can (the CPU's); not with synchronised statistics, whose pieces
  // take none.
  bool can_fuse_activation(ActKind k) const override {
    return k == p_.activation || (!sync_ && k_ && k_->can_fuse(k));
  }
  // y and dy as channel slices of a concat's output and gradient, where the kernel takes strided rows.
  bool writes_channel_slice() const override { return k_ && k_->strided_rows(); }
  bool fuse_activation(std::optional<ActKind> k) override {
    const ActKind want = k.value_or(ActKind::Linear);
    if (want == p_.activation) return true;
    if (want != ActKind::Linear && (sync_ || !k_->can_fuse(want))) return false;
    p_.activation = want;
    k_ = make_kernel<BatchNormKernel>(ctx(), p_);
    return true;
  }

  // Sibling batch norms of a concat in one forward and one backward pass (the concat's rows read and
  // written once), where the kernel takes them, the statistics are this replica's own and gamma and
  // beta both train.
  bool joins_siblings() const override { return !sync_ && k_ && k_->joins_siblings() && grads_.size() == 2; }
  void forward_siblings(const std::vector<Layer*>& members, const std::vector<const Tensor*>& x, Tensor& y,
                        bool training) override {
    std::vector<BatchNormKernel::SiblingForward> parts;
    for (size_t q = 0; q < members.size(); ++q) {
      BatchNorm& b = sibling(members[q]);
      parts.push_back({&*b.k_, x[q], &b.params_[0], &b.params_[1], &b.mean_, &b.invstd_, &b.params_[2], &b.params_[3]});
    }
    k_->forward_siblings(training, y, parts);
  }
  void backward_siblings(const std::vector<Layer*>& members, const std::vector<const Tensor*>& x, const Tensor& y,
                         const Tensor& dy, const std::vector<Tensor*>& dx) override {
    std::vector<BatchNormKernel::Sibling> parts;
    for (size_t q = 0; q < members.size(); ++q) {
      BatchNorm& b = sibling(members[q]);
      parts.push_back({&*b.k_, x[q], &b.params_[0], &b.mean_, &b.invstd_, dx[q], &b.grads_[0], &b.grads_[1]});
    }
    k_->backward_siblings(y, dy, parts);
  }

  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    if (training && sync_)
      forward_sync(*x[0], y);
    else if (training)
      k_->forward_train(*x[0], params_[0], params_[1], y, mean_, invstd_, params_[2], params_[3]);
    else
      k_->forward_infer(*x[0], params_[0], params_[1], params_[2], params_[3], y);
  }

  void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (sync_)
      backward_sync(*x[0], dy, *dx[0]);
    else
      k_->backward(*x[0], y, params_[0], dy, mean_, invstd_, *dx[0], grads_[0], grads_[1]);
  }

 private:
  Initializer gamma_init_, beta_init_, moving_mean_init_, moving_variance_init_;
  // stats_ = [count | Σ | Σ²], grad_sums_ = [Σdy | Σdy(x - mean)]: what synchronised batch norm
  // sums over the replicas, on this device.
  Tensor count() { return stats_.slice(0, 1); }
  Tensor stat(int k) { return stats_.slice(1 + k * c_, 1 + (k + 1) * c_); }
  Tensor grad_sum(int k) { return grad_sums_.slice(k * c_, (k + 1) * c_); }

  // SyncBatchNorm forward: the global mean (pass 1: the channel sums and row count summed over the
  // replicas), then the sums centred on it (pass 2, summed likewise) give the global statistics as
  // forward_train's own sums give a batch's; then normalisation with them. All on the device, the
  // sums through the replicas' device all-reduce: no host value, so a recorded step holds it.
  void forward_sync(const Tensor& x, Tensor& y) {
    Tensor n = count(), sum = stat(0), sumsq = stat(1);
    k_->channel_sums(x, Tensor(), sum, sumsq);
    k_->sync_count(x, n);
    Tensor first = stats_.slice(0, 1 + c_);
    sync_->all_reduce_sum(first);
    k_->sync_mean(sum, n, mean_);
    k_->channel_sums(x, mean_, sum, sumsq);
    Tensor second = stats_.slice(1, 1 + 2 * c_);
    sync_->all_reduce_sum(second);
    k_->sync_stats(sum, sumsq, n, mean_, invstd_, var_, params_[2], params_[3]);
    k_->forward_infer(x, params_[0], params_[1], mean_, var_, y);
  }

  // SyncBatchNorm backward: this replica's dgamma/dbeta are its own sums (the gradient
  // all-reduce adds the replicas'); dx needs the global sums (one more all-reduce) and count.
  void backward_sync(const Tensor& x, const Tensor& dy, Tensor& dx) {
    Tensor sdy = grad_sum(0), sdx = grad_sum(1);
    k_->backward_sums(x, dy, mean_, sdy, sdx);
    k_->sync_param_grads(sdy, sdx, invstd_, grads_[0], grads_[1]);
    sync_->all_reduce_sum(grad_sums_);
    k_->backward_apply(x, dy, params_[0], mean_, invstd_, sdy, sdx, count(), dx);
  }

  static BatchNorm& sibling(Layer* l) {
    auto* b = dynamic_cast<BatchNorm*>(l);
    if (!b || !b->joins_siblings()) throw std::logic_error("batchnorm: a sibling that is not a joining batch norm");
    return *b;
  }

  StatsSync* sync_ = nullptr;
  Tensor var_, stats_, grad_sums_;
  BatchNormParams p_;
  int64_t c_ = 0, elems_ = 0;
  KernelSlot<BatchNormKernel> k_;
  Tensor mean_, invstd_;
};

RegisterLayer<BatchNorm> reg("batchnorm", "BatchNormalization");

}  // namespace
}  // namespace trainer
