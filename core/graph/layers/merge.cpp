// Merge layers: concat (channel axis, Keras concatenate), add (residual sum) and multiply (Keras Multiply, broadcast gates).
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/elementwise.h"
#include "core/ops/multiply.h"

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

// Keras's Multiply of two inputs: of one shape, or one broadcast over the other's leading axes (its
// shape, leading 1s aside, the other's trailing axes: a squeeze-and-excitation gate [C] or [1, 1, C]
// over an image [H, W, C], as Keras's merge expands the smaller input at axis 1). Keras takes more
// than two: chain multiply layers for that.
class Multiply final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Multiply)
  bool output_reusable() const override { return true; }  // backward reads the inputs, not y
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  explicit Multiply(cfg::MapReader&) {}
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return 2; }
  Shape infer(const std::vector<Shape>& in) override {
    full_ = in[1].numel() > in[0].numel() ? 1 : 0;
    const Shape& f = in[size_t(full_)];
    const Shape& g = in[size_t(1 - full_)];
    size_t lead = 0;
    while (lead + 1 < g.rank() && g[lead] == 1) ++lead;
    const size_t k = g.rank() - lead;  // g's axes after its leading 1s (at least its last)
    bool ok = k <= f.rank();
    for (size_t i = 0; ok && i < k; ++i) ok = g[lead + i] == f[f.rank() - k + i];
    ok = ok || g.numel() == 1;  // one value for every element
    if (!ok)
      spec().fail(fmt::format("multiply '{}': input shapes {} and {} neither agree nor broadcast (the smaller one's "
                              "shape, leading 1s aside, must be the other's last axes: a gate [C] or [1, 1, C] over "
                              "[H, W, C])",
                              name(), in[0].str(), in[1].str()));
    C_ = g.numel();
    P_ = C_ ? f.numel() / C_ : 0;
    elems_ = f.numel();
    return f;
  }
  int64_t flops() const override { return elems_; }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<MultiplyKernel>(ctx, {});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    Tensor out = wide(y);
    k_->forward(wide(*x[size_t(full_)]), gate(*x[size_t(1 - full_)]), out);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor da = wide(*dx[size_t(full_)]), db = gate(*dx[size_t(1 - full_)]);
    k_->backward(wide(*x[size_t(full_)]), gate(*x[size_t(1 - full_)]), wide(dy), da, db);
  }

 private:
  // The full input (and y, dy) as [N, P, C], the broadcast one as [N, C]; undefined stays undefined.
  Tensor wide(const Tensor& t) const { return t.defined() ? t.reshape(Shape{t.dim(0), P_, C_}) : t; }
  Tensor gate(const Tensor& t) const { return t.defined() ? t.reshape(Shape{t.dim(0), C_}) : t; }
  int full_ = 0;  // the input of the output's shape
  int64_t P_ = 1, C_ = 0, elems_ = 0;
  KernelSlot<MultiplyKernel> k_;
};

RegisterLayer<Concat> reg_concat("concat", "Concatenate");
RegisterLayer<Add> reg_add("add", "Add");
RegisterLayer<Multiply> reg_multiply("multiply", "Multiply");

}  // namespace
}  // namespace trainer
