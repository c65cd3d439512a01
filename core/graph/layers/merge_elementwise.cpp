// Element-wise merge layers: Keras's Subtract, Average, Maximum and Minimum of inputs of one shape (the merge op).
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/merge.h"

namespace trainer {
namespace {

// Keras's Subtract (two inputs: x0 − x1), Average, Maximum and Minimum (2 to 64 inputs), each
// element on its own: inputs of one shape (Keras's broadcast of unequal shapes is not taken). Of
// equal values Maximum and Minimum give the gradient to the earliest input, as Keras's chained
// maximum(a, b) under TensorFlow does (merge_math.h).
template <MergeMode kMode>
class ElementwiseMerge final : public Layer {
 public:
  TRAINER_LAYER_CLONE(ElementwiseMerge)
  bool output_reusable() const override { return true; }  // backward reads the inputs, not y
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  explicit ElementwiseMerge(cfg::MapReader&) {}
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return kMode == MergeMode::Subtract ? 2 : MergeKernel::kMaxInputs; }
  Shape infer(const std::vector<Shape>& in) override {
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i] != in[0])
        spec().fail(fmt::format("{} '{}': input shapes {} and {} differ (the inputs of an element-wise merge share "
                                "one shape)",
                                type(), name(), in[0].str(), in[i].str()));
    elems_ = in[0].numel() * int64_t(in.size() - (kMode == MergeMode::Average ? 0 : 1));
    return in[0];
  }
  int64_t flops() const override { return elems_; }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<MergeKernel>(ctx, MergeParams{kMode});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->forward(x, y); }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    k_->backward(x, dy, dx);
  }

 private:
  int64_t elems_ = 0;
  KernelSlot<MergeKernel> k_;
};

RegisterLayer<ElementwiseMerge<MergeMode::Subtract>> reg_subtract("subtract", "Subtract");
RegisterLayer<ElementwiseMerge<MergeMode::Average>> reg_average("average", "Average");
RegisterLayer<ElementwiseMerge<MergeMode::Maximum>> reg_maximum("maximum", "Maximum");
RegisterLayer<ElementwiseMerge<MergeMode::Minimum>> reg_minimum("minimum", "Minimum");

}  // namespace
}  // namespace trainer
