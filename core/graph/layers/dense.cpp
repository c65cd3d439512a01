// dense layer (Keras Dense) on a flat input.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/dense.h"

namespace trainer {
namespace {

class Dense final : public Layer {
 public:
  explicit Dense(cfg::MapReader& r) {
    p_.units = r.get_int("units", std::nullopt, 1, 1 << 24);
    p_.bias = r.get<bool>("use_bias", true);
    init_ = read_init(r, "kernel_initializer", "glorot_uniform");
  }
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != 1)
      spec().fail(fmt::format("dense '{}' needs a flat input, got {}; put a flatten or global_avg_pool2d layer before it",
                              name(), in[0].str()));
    k_in_ = in[0][0];
    return {p_.units};
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> ps{{"kernel", Shape{k_in_, p_.units}, init_, true, k_in_, p_.units}};
    if (p_.bias) ps.push_back({"bias", Shape{p_.units}, InitKind::Zeros, true});
    return ps;
  }
  int64_t flops() const override { return 2 * k_in_ * p_.units; }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<DenseKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    k_->forward(*x[0], params_[0], p_.bias ? params_[1] : none(), y);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = p_.bias ? grads_[1] : Tensor();
    k_->backward(*x[0], params_[0], dy, *dx[0], grads_[0], db);
  }

 private:
  DenseParams p_;
  InitKind init_;
  int64_t k_in_ = 0;
  std::unique_ptr<DenseKernel> k_;
};

RegisterLayer<Dense> reg("dense", "Dense");

}  // namespace
}  // namespace trainer
