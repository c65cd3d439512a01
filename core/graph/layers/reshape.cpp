// Shape-only and regularising layers: flatten, reshape, dropout and spatial_dropout1d/2d.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/graph/layers/common.h"
#include "core/ops/elementwise.h"

namespace trainer {
namespace {

// Keras's Reshape(target_shape): the sample's values, in their (channels-last) order, under a new
// shape without the batch axis: [H, W, C] (an image), [T, F] (a sequence) or [F]; one dimension may
// be -1, inferred from the others, as in Keras. A copy.
class Reshape : public Layer {
 public:
  TRAINER_LAYER_CLONE(Reshape)
  explicit Reshape(std::vector<int64_t> target) : target_(std::move(target)) {}
  explicit Reshape(cfg::MapReader& r) {
    const cfg::Node t = r.required("target_shape");
    if (!t.is_seq() || t.size() == 0 || t.size() > 3)
      t.fail("'target_shape' must list 1 to 3 dimensions without the batch: [H, W, C], [steps, features] or [features]; "
             "one may be -1");
    for (const cfg::Node& d : t.items()) {
      const int64_t v = d.as<int64_t>();
      if (v == 0 || v < -1 || v > (int64_t(1) << 40)) d.fail("a target dimension must be positive, or -1 (inferred)");
      if (v == -1 && std::find(target_.begin(), target_.end(), -1) != target_.end())
        d.fail("only one target dimension may be -1");
      target_.push_back(v);
    }
  }
  Shape infer(const std::vector<Shape>& in) override {
    const int64_t n = in[0].numel();
    int64_t known = 1;
    for (int64_t v : target_)
      if (v != -1) known = known > n / v ? n + 1 : known * v;  // past n (no overflow): it fails below
    std::vector<int64_t> dims = target_;
    for (int64_t& v : dims)
      if (v == -1) v = known > 0 && n % known == 0 ? n / known : 0;
    const Shape out(dims);
    if (std::find(dims.begin(), dims.end(), 0) != dims.end() || known > n || out.numel() != n)
      spec().fail(fmt::format("reshape '{}': its input {} holds {} values per sample, which target_shape [{}] cannot hold",
                              name(), in[0].str(), n, target_text()));
    return out;
  }
  LayerConfig describe() const override { return LayerConfig().put_text("target_shape", target_text()); }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override {
    ctx().copy(y.data(), x[0]->data(), y.bytes());
  }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (dx[0]->defined()) ctx().copy(dx[0]->data(), dy.data(), dy.bytes());
  }

 private:
  std::string target_text() const {
    std::string s;
    for (int64_t v : target_) s += (s.empty() ? "" : ", ") + std::to_string(v);
    return s;
  }
  std::vector<int64_t> target_;
};

// Keras's Flatten: Reshape([-1]) (the channels-last order kept; its ONNX export Transposes an
// image to NHWC first).
struct Flatten final : Reshape {
  TRAINER_LAYER_CLONE(Flatten)
  explicit Flatten(cfg::MapReader&) : Reshape(std::vector<int64_t>{-1}) {}
  LayerConfig describe() const override { return LayerConfig(); }
};

// Keras's Dropout (kSpatial 0: each element), SpatialDropout1D (1: each channel of a sequence
// [T, C] at every step) and SpatialDropout2D (2: each channel of an image [H, W, C] at every pixel).
template <int kSpatial>
class Dropout final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Dropout)
  explicit Dropout(cfg::MapReader& r) { p_.rate = float(r.get_float("rate", std::nullopt, 0.0, 0.999)); }
  Shape infer(const std::vector<Shape>& in) override {
    if (kSpatial && in[0].rank() != size_t(kSpatial + 1))
      spec().fail(fmt::format("spatial_dropout{}d '{}' needs {} input, got {}", kSpatial, name(),
                              kSpatial == 1 ? "a sequence (steps, channels)" : "an image (H, W, C)", in[0].str()));
    return in[0];
  }
  LayerConfig describe() const override { return LayerConfig().put_real("rate", p_.rate); }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<DropoutKernel>(ctx, p_);
  }
  void set_step_seed(uint64_t seed) override { seed_.set(seed); }
  void set_step_scalars(const StepScalars* step, uint64_t node) override { seed_.set(step, node); }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    training_ = training && p_.rate > 0;
    if (!training_) {
      ctx().copy(y.data(), x[0]->data(), y.bytes());
      return;
    }
    // The mask's memory grows and is kept (a short batch views the front of it): made again at
    // each batch size, a step recorded as a CUDA graph after another size's launched step would
    // allocate it inside the capture (docs/gpu-runs/2026-11-30-h200.md).
    const Shape& xs = x[0]->shape();
    const Shape ms = kSpatial ? Shape{xs[0], xs.back()} : xs;
    if (mask_.shape() != ms) mask_ = Tensor::view(mask_mem_.get(ctx(), size_t(ms.numel())), ms, DType::U8, ctx().device());
    k_->forward(*x[0], y, mask_, seed_.get());
  }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]->defined()) return;
    if (training_) k_->backward(dy, mask_, *dx[0]);
    else ctx().copy(dx[0]->data(), dy.data(), dy.bytes());
  }

 private:
  DropoutParams p_;
  StepSeed seed_;
  bool training_ = false;
  Tensor mask_;      // a view of mask_mem_ at this batch's shape
  Scratch mask_mem_;
  KernelSlot<DropoutKernel> k_;
};

RegisterLayer<Flatten> reg_flatten("flatten", "Flatten");
RegisterLayer<Reshape> reg_reshape("reshape", "Reshape");
RegisterLayer<Dropout<0>> reg_dropout("dropout", "Dropout");
RegisterLayer<Dropout<1>> reg_spatial1d("spatial_dropout1d", "SpatialDropout1D");
RegisterLayer<Dropout<2>> reg_spatial2d("spatial_dropout2d", "SpatialDropout2D");

}  // namespace
}  // namespace trainer
