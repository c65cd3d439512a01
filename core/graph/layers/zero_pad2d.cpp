// zero_pad2d and cropping2d layers (Keras ZeroPadding2D, Cropping2D): `padding:` / `cropping:` as 1 | `[h, w]` | `[[top, bottom], [left, right]]`.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/pad2d.h"

namespace trainer {
namespace {

// A non-negative integer from a config node (messages at the node).
int pad_amount(const cfg::Node& n) {
  if (!n.is_scalar()) n.fail(fmt::format("'{}' must be an integer", n.path()));
  int v = n.as<int>();
  if (v < 0) n.fail(fmt::format("'{}' must not be negative, not {}", n.path(), v));
  return v;
}

// Keras' three forms: one int (all four sides), [h, w] (symmetric per dimension) or
// [[top, bottom], [left, right]]. Default: Keras's (ZeroPadding2D 1, Cropping2D 0).
Pad2dParams read_pad2d(cfg::MapReader& r, const char* key = "padding", int fallback = 1) {
  cfg::Node n = r.optional(key);
  if (!n.defined()) return {fallback, fallback, fallback, fallback};
  const char* forms = "one integer, [rows, columns] or [[top, bottom], [left, right]]";
  if (n.is_scalar()) {
    int v = pad_amount(n);
    return {v, v, v, v};
  }
  if (!n.is_seq() || n.size() != 2) n.fail(fmt::format("'{}' must be {}", n.path(), forms));
  cfg::Node h = n.at(0), w = n.at(1);
  if (h.is_scalar() && w.is_scalar()) {
    int a = pad_amount(h), b = pad_amount(w);
    return {a, a, b, b};
  }
  if (h.is_seq() && w.is_seq() && h.size() == 2 && w.size() == 2)
    return {pad_amount(h.at(0)), pad_amount(h.at(1)), pad_amount(w.at(0)), pad_amount(w.at(1))};
  n.fail(fmt::format("'{}' must be {}", n.path(), forms));
}

class ZeroPad2d final : public Layer {
 public:
  TRAINER_LAYER_CLONE(ZeroPad2d)
  bool output_reusable() const override { return true; }  // backward never reads y
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  explicit ZeroPad2d(cfg::MapReader& r) : p_(read_pad2d(r)) {}

  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 3)
      spec().fail(fmt::format("zero_pad2d '{}' needs an image input (H, W, C), got {}", name(), x.str()));
    return folded_into_.empty() ? pad2d_output_shape(x, p_) : x;
  }
  LayerConfig describe() const override {
    LayerConfig c;
    c.put_int("top", p_.top).put_int("bottom", p_.bottom).put_int("left", p_.left).put_int("right", p_.right);
    if (!folded_into_.empty()) c.put_text("folded_into", folded_into_);
    return c;
  }
  // Folded (Graph, pad_fold): the reader adds the zeros; this layer passes its input on unchanged.
  bool identity() const override { return !folded_into_.empty(); }
  std::optional<std::array<int, 4>> padding_to_fold() const override {
    return std::array<int, 4>{p_.top, p_.bottom, p_.left, p_.right};
  }
  void fold_padding(const std::string& reader) override { folded_into_ = reader; }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<Pad2dKernel>(ctx, p_);
  }
  // Folded: a copy only where the plan could not run it in place (then x and y are two buffers).
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    if (folded_into_.empty()) k_->forward(*x[0], y);
    else if (y.data() != x[0]->data()) ctx().copy(y.data(), x[0]->data(), y.bytes());
  }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]->defined()) return;
    if (folded_into_.empty()) k_->backward(dy, *dx[0]);
    else if (dx[0]->data() != dy.data()) ctx().copy(dx[0]->data(), dy.data(), dy.bytes());
  }

 private:
  Pad2dParams p_;
  std::string folded_into_;  // the reader that adds this layer's zeros (pad_fold), or ""
  KernelSlot<Pad2dKernel> k_;
};

RegisterLayer<ZeroPad2d> reg("zero_pad2d", "ZeroPadding2D");

// Keras's Cropping2D: the rows and columns `cropping` names removed from each side. The padding
// kernel's two halves run it: its backward (the interior of a padded tensor) is this forward, its
// forward (zeros around a copy) this backward.
class Cropping2d final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Cropping2d)
  bool output_reusable() const override { return true; }  // backward never reads y
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  explicit Cropping2d(cfg::MapReader& r) : p_(read_pad2d(r, "cropping", 0)) {}

  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 3)
      spec().fail(fmt::format("cropping2d '{}' needs an image input (H, W, C), got {}", name(), x.str()));
    const Shape out{x[0] - p_.top - p_.bottom, x[1] - p_.left - p_.right, x[2]};
    if (out[0] <= 0 || out[1] <= 0)
      spec().fail(fmt::format("cropping2d '{}': cropping {}/{} rows and {}/{} columns leaves nothing of its {}x{} input",
                              name(), p_.top, p_.bottom, p_.left, p_.right, x[0], x[1]));
    return out;
  }
  LayerConfig describe() const override {
    return LayerConfig().put_int("top", p_.top).put_int("bottom", p_.bottom).put_int("left", p_.left).put_int("right", p_.right);
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<Pad2dKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->backward(*x[0], y); }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (dx[0]->defined()) k_->forward(dy, *dx[0]);
  }

 private:
  Pad2dParams p_;
  KernelSlot<Pad2dKernel> k_;
};

RegisterLayer<Cropping2d> reg_crop("cropping2d", "Cropping2D");

}  // namespace
}  // namespace trainer
