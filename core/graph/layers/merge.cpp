// Merge layers: concat (channel axis, Keras concatenate) and add (residual sum).
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/elementwise.h"

namespace trainer {
namespace {

class Concat final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Concat)
  bool output_reusable() const override { return true; }  // backward never reads y
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  explicit Concat(cfg::MapReader& r) {
    cfg::Node axis = r.optional("axis");
    if (axis.defined() && axis.as<int>() != -1) axis.fail("concat joins along the channel (last) axis: axis must be -1");
  }
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return -1; }
  bool joins_channels() const override { return true; }  // inputs written in place are not copied (Layer)
  LayerConfig describe() const override { return LayerConfig().put_int("axis", -1); }  // the channel (last) axis
  Shape infer(const std::vector<Shape>& in) override {
    Shape out = in[0];
    for (size_t i = 1; i < in.size(); ++i) {
      bool ok = in[i].rank() == out.rank();
      for (size_t d = 0; ok && d + 1 < out.rank(); ++d) ok = in[i][d] == out[d];
      if (!ok)
        spec().fail(fmt::format("concat '{}': inputs {} and {} differ in more than the channel axis", name(),
                                in[0].str(), in[i].str()));
      out[out.rank() - 1] += in[i].back();
    }
    return out;
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<ElementwiseKernel>(ctx, {});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->concat(x, y); }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    k_->split(dy, dx);
  }

 private:
  KernelSlot<ElementwiseKernel> k_;
};

class Add final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Add)
  bool output_reusable() const override { return true; }  // backward never reads y
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  explicit Add(cfg::MapReader&) {}
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return -1; }
  Shape infer(const std::vector<Shape>& in) override {
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i] != in[0])
        spec().fail(fmt::format("add '{}': input shapes {} and {} differ", name(), in[0].str(), in[i].str()));
    elems_ = in[0].numel() * int64_t(in.size() - 1);
    return in[0];
  }
  int64_t flops() const override { return elems_; }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<ElementwiseKernel>(ctx, {});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->add(x, y); }
  // A bf16 branch joining an f32 residual stream: forward reads it as it is where the kernel adds
  // mixed types (widened exactly, as the converted copy was), and backward writes its gradient
  // converted from dy — one pass each, where a copy and the executor's conversion took two; the
  // same bits.
  bool reads_input_as(DType t) const override { return k_ && k_->adds_mixed() && shape_checks::is_float(t); }
  bool writes_input_grad_as(int, DType t) const override { return shape_checks::is_float(t); }
  // Each input's gradient is dy: one of them may be dy's buffer itself (the plan's grad_over), the
  // residual stream's gradient passed through without a copy. dy is read, never written, so the
  // other inputs still take it as it is.
  bool passes_grad_through(int) const override { return true; }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    for (Tensor* d : dx) {
      if (!d->defined() || d->data() == dy.data()) continue;
      if (d->dtype() == dy.dtype()) ctx().copy(d->data(), dy.data(), dy.bytes());
      else k_->convert(dy, *d);
    }
  }

 private:
  int64_t elems_ = 0;
  KernelSlot<ElementwiseKernel> k_;
};

RegisterLayer<Concat> reg_concat("concat", "Concatenate");
RegisterLayer<Add> reg_add("add", "Add");

}  // namespace
}  // namespace trainer
