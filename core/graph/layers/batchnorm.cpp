// batchnorm layer (Keras BatchNormalization over the channel axis): momentum 0.99, epsilon 1e-3.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/batchnorm.h"

namespace trainer {
namespace {

class BatchNorm final : public Layer {
 public:
  explicit BatchNorm(cfg::MapReader& r) {
    p_.momentum = float(r.get_float("momentum", 0.99, 0.0, 1.0));
    p_.epsilon = float(r.get_float("epsilon", 1e-3, 1e-12, 1.0));
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
    return {{"gamma", Shape{c_}, InitKind::Ones, true},
            {"beta", Shape{c_}, InitKind::Zeros, true},
            {"moving_mean", Shape{c_}, InitKind::Zeros, false},
            {"moving_variance", Shape{c_}, InitKind::Ones, false}};
  }

  int64_t flops() const override { return 2 * elems_; }

  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<BatchNormKernel>(ctx, p_);
    mean_ = ctx.zeros(Shape{c_});
    invstd_ = ctx.zeros(Shape{c_});
  }

  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    if (training)
      k_->forward_train(*x[0], params_[0], params_[1], y, mean_, invstd_, params_[2], params_[3]);
    else
      k_->forward_infer(*x[0], params_[0], params_[1], params_[2], params_[3], y);
  }

  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    k_->backward(*x[0], params_[0], dy, mean_, invstd_, *dx[0], grads_[0], grads_[1]);
  }

 private:
  BatchNormParams p_;
  int64_t c_ = 0, elems_ = 0;
  std::unique_ptr<BatchNormKernel> k_;
  Tensor mean_, invstd_;
};

RegisterLayer<BatchNorm> reg("batchnorm", "BatchNormalization");

}  // namespace
}  // namespace trainer
