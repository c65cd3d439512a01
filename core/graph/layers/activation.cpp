// Activation layers: `activation` (with `function:`) and the shorthands relu, relu6, sigmoid, tanh.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/activation.h"

namespace trainer {
namespace {

class Activation : public Layer {
 public:
  explicit Activation(ActKind k) { p_.kind = k; }
  explicit Activation(cfg::MapReader& r) {
    std::vector<std::string> names;
    for (const char* const* n = activation_names(); *n; ++n) names.push_back(*n);
    p_.kind = *parse_activation(r.get_choice("function", names));
  }
  Shape infer(const std::vector<Shape>& in) override {
    elems_ = in[0].numel();
    return in[0];
  }
  int64_t flops() const override { return elems_; }
  bool in_place() const override { return true; }  // backward reads only y (backward_reads_y)
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<ActivationKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->forward(*x[0], y); }
  void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    // x[0] is y's buffer when the graph runs this layer in place: the kernel reads only y.
    if (dx[0]->defined()) k_->backward(*x[0], y, dy, *dx[0]);
  }

 private:
  ActivationParams p_;
  int64_t elems_ = 0;
  std::unique_ptr<ActivationKernel> k_;
};

template <ActKind K>
struct Fixed final : Activation {
  explicit Fixed(cfg::MapReader&) : Activation(K) {}
};

RegisterLayer<Activation> reg("activation", "Activation");
RegisterLayer<Fixed<ActKind::Relu>> reg_relu("relu", "ReLU");
RegisterLayer<Fixed<ActKind::Relu6>> reg_relu6("relu6", "ReLU");
RegisterLayer<Fixed<ActKind::Sigmoid>> reg_sigmoid("sigmoid", "Activation");
RegisterLayer<Fixed<ActKind::Tanh>> reg_tanh("tanh", "Activation");

}  // namespace
}  // namespace trainer
