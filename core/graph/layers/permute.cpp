// permute layer (Keras Permute): a sample's axes reordered by `dims` (numbered from 1, the batch being 0); no weights.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/permute.h"

namespace trainer {
namespace {

// Keras's Permute(dims): `{type: permute, dims: [2, 1]}` swaps a sequence's steps and features;
// output axis i is input axis dims[i]. Its gradient is the inverse permutation (a copy either way).
class Permute final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Permute)
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  bool output_reusable() const override { return true; }  // backward reads neither x nor y
  explicit Permute(cfg::MapReader& r) {
    dims_node_ = r.required("dims");
    for (const cfg::Node& d : dims_node_.items()) keras_dims_.push_back(d.as<int>());
  }
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    const size_t r = x.rank();
    std::vector<bool> seen(r + 1, false);
    bool ok = keras_dims_.size() == r && r >= 1 && r <= 3;
    for (int d : keras_dims_) {
      ok = ok && d >= 1 && size_t(d) <= r && !seen[size_t(d)];
      if (ok) seen[size_t(d)] = true;
    }
    if (!ok)
      dims_node_.fail(fmt::format("permute '{}': dims must list each axis of its input {} once, numbered 1 to {} (Keras "
                                  "numbers them from 1, the batch being 0)",
                                  name(), x.keras_str(), r));
    p_.dims.clear();
    std::vector<int64_t> out;
    for (int d : keras_dims_) {
      p_.dims.push_back(d - 1);
      out.push_back(x[size_t(d - 1)]);
    }
    return Shape(out);
  }
  LayerConfig describe() const override {
    std::string dims;
    for (int d : keras_dims_) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    return LayerConfig().put_text("dims", dims);
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<PermuteKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->forward(*x[0], y); }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (dx[0]->defined()) k_->backward(dy, *dx[0]);
  }

 private:
  cfg::Node dims_node_;
  std::vector<int> keras_dims_;
  PermuteParams p_;
  KernelSlot<PermuteKernel> k_;
};

RegisterLayer<Permute> reg("permute", "Permute");

}  // namespace
}  // namespace trainer
