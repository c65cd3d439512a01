// zero_pad1d, cropping1d, up_sampling1d and repeat_vector layers (Keras ZeroPadding1D, Cropping1D, UpSampling1D, RepeatVector) over a sequence [T, C] (a vector [C]: one step), run by the 2D layers' kernels on the one-row image [1, T, C].
#include <fmt/format.h>

#include <utility>

#include "core/graph/layers/common.h"
#include "core/ops/pad2d.h"
#include "core/ops/upsample.h"

namespace trainer {
namespace {

// Keras's `padding` / `cropping` of a sequence: one integer (both ends) or [before, after], each >= 0.
std::pair<int, int> read_ends(cfg::MapReader& r, const char* key, int fallback) {
  const cfg::Node n = r.optional(key);
  if (!n.defined()) return {fallback, fallback};
  auto amount = [](const cfg::Node& v) {
    if (!v.is_scalar()) v.fail(fmt::format("'{}' must be an integer", v.path()));
    const int a = v.as<int>();
    if (a < 0) v.fail(fmt::format("'{}' must not be negative, not {}", v.path(), a));
    return a;
  };
  if (n.is_scalar()) return {amount(n), amount(n)};
  if (!n.is_seq() || n.size() != 2) n.fail(fmt::format("'{}' must be one integer or [before, after]", n.path()));
  return {amount(n.at(0)), amount(n.at(1))};
}

// A sequence [N, T, C] as the one-row image [N, 1, T, C] (a view); a vector [N, C] as one step.
Tensor as_row(const Tensor& t) {
  return t.shape().rank() == 2 ? t.reshape(Shape{t.dim(0), 1, 1, t.dim(1)}) : t.reshape(Shape{t.dim(0), 1, t.dim(1), t.dim(2)});
}

// What the three share: a sequence input, a kernel made at bind, and no weights.
class SequenceShapeLayer : public Layer {
 public:
  bool output_reusable() const override { return true; }  // backward reads neither x nor y
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 2)
      spec().fail(fmt::format("{} '{}' needs a sequence input (steps, channels), got {}", type_name(), name(), x.str()));
    const int64_t t = steps(x[0]);
    if (t <= 0)
      spec().fail(fmt::format("{} '{}': cropping {} and {} steps leaves nothing of its {} steps", type_name(), name(),
                              before_, after_, x[0]));
    return Shape{t, x[1]};
  }

 protected:
  virtual const char* type_name() const = 0;
  virtual int64_t steps(int64_t t) const = 0;
  int before_ = 0, after_ = 0;
};

// Keras's ZeroPadding1D (kCrop false) and Cropping1D (kCrop true): the padding kernel's two halves,
// swapped for cropping (as cropping2d).
template <bool kCrop>
class PadOrCrop1d final : public SequenceShapeLayer {
 public:
  TRAINER_LAYER_CLONE(PadOrCrop1d)
  explicit PadOrCrop1d(cfg::MapReader& r) { std::tie(before_, after_) = read_ends(r, kCrop ? "cropping" : "padding", 1); }
  LayerConfig describe() const override { return LayerConfig().put_int("before", before_).put_int("after", after_); }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<Pad2dKernel>(ctx, Pad2dParams{0, 0, before_, after_});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    Tensor out = as_row(y);
    if (kCrop) k_->backward(as_row(*x[0]), out);  // the interior
    else k_->forward(as_row(*x[0]), out);         // zeros around a copy
  }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]->defined()) return;
    Tensor out = as_row(*dx[0]);
    if (kCrop) k_->forward(as_row(dy), out);
    else k_->backward(as_row(dy), out);
  }

 private:
  const char* type_name() const override { return kCrop ? "cropping1d" : "zero_pad1d"; }
  int64_t steps(int64_t t) const override { return kCrop ? t - before_ - after_ : t + before_ + after_; }
  KernelSlot<Pad2dKernel> k_;
};

// Keras's UpSampling1D (kRepeat false): each step of a sequence repeated `size` times (its only
// interpolation); Keras's RepeatVector (kRepeat true): a vector [C] repeated `n` times as the
// sequence [n, C] (an encoder's summary fed to every step of a decoder) — the same kernel on the
// vector as one step. Backward sums the copies.
template <bool kRepeat>
class UpSampling1d final : public SequenceShapeLayer {
 public:
  TRAINER_LAYER_CLONE(UpSampling1d)
  explicit UpSampling1d(cfg::MapReader& r)
      : size_(int(kRepeat ? r.get_int("n", std::nullopt, 1, 1 << 20) : r.get_int("size", 2, 1, 1024))) {}
  Shape infer(const std::vector<Shape>& in) override {
    if (!kRepeat) return SequenceShapeLayer::infer(in);
    if (in[0].rank() != 1)
      spec().fail(fmt::format("repeat_vector '{}' needs a vector input (features), got {}; a flatten or a global pool "
                              "makes one, an lstm or gru without return_sequences gives one",
                              name(), in[0].str()));
    return Shape{size_, in[0][0]};
  }
  LayerConfig describe() const override { return LayerConfig().put_int(kRepeat ? "n" : "size", size_); }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<UpsampleKernel>(ctx, UpsampleParams{1, size_, false});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    Tensor out = as_row(y);
    k_->forward(as_row(*x[0]), out);
  }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]->defined()) return;
    Tensor out = as_row(*dx[0]);
    k_->backward(as_row(dy), out);
  }

 private:
  const char* type_name() const override { return kRepeat ? "repeat_vector" : "up_sampling1d"; }
  int64_t steps(int64_t t) const override { return t * size_; }
  int size_;
  KernelSlot<UpsampleKernel> k_;
};

RegisterLayer<PadOrCrop1d<false>> reg_pad("zero_pad1d", "ZeroPadding1D");
RegisterLayer<PadOrCrop1d<true>> reg_crop("cropping1d", "Cropping1D");
RegisterLayer<UpSampling1d<false>> reg_up("up_sampling1d", "UpSampling1D");
RegisterLayer<UpSampling1d<true>> reg_repeat("repeat_vector", "RepeatVector");

}  // namespace
}  // namespace trainer
