// softmax layer (Keras Activation("softmax")): the model's probabilities; in training the
// engine fuses it with the cross-entropy loss and starts backward from its input.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/softmax.h"

namespace trainer {
namespace {

class Softmax final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Softmax)
  // Keras's Activation("softmax"), {type: activation, function: softmax} (or activation: softmax),
  // is given this type by parse_model: the key, when there, names softmax.
  explicit Softmax(cfg::MapReader& r) {
    for (const char* key : {"function", "activation"})
      if (r.has(key)) r.get_choice(key, {"softmax"});
  }
  Shape infer(const std::vector<Shape>& in) override {
    // Over the last axis (Keras's axis -1): class scores, or a sequence's scores per position.
    if (in[0].rank() != 1 && in[0].rank() != 2)
      spec().fail(fmt::format("softmax '{}' needs a flat input or a sequence [time, classes], got {}", name(),
                              in[0].str()));
    elems_ = in[0].numel();
    return in[0];
  }
  int64_t flops() const override { return 3 * elems_; }
  LayerConfig describe() const override { return LayerConfig().put_int("axis", -1); }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<SoftmaxKernel>(ctx, {});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->forward(*x[0], y); }
  void backward(const std::vector<const Tensor*>&, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (dx[0]->defined()) k_->backward(y, dy, *dx[0]);
  }

 private:
  int64_t elems_ = 0;
  KernelSlot<SoftmaxKernel> k_;
};

RegisterLayer<Softmax> reg("softmax", "Activation");

}  // namespace
}  // namespace trainer
