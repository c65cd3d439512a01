// Pooling layers: max_pool2d, avg_pool2d (Keras MaxPooling2D/AveragePooling2D), global_avg_pool2d, global_max_pool2d,
// global_avg_pool1d and global_max_pool1d (GlobalAveragePooling2D/1D, GlobalMaxPooling2D/1D).
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/pooling.h"

namespace trainer {
namespace {

class Pool2d : public Layer {
 public:
  Pool2d(cfg::MapReader& r, PoolKind kind) {
    p_.kind = kind;
    std::tie(p_.kh, p_.kw) = r.get_pair("pool", std::pair{2, 2});
    // Keras: strides default to the pool size.
    std::tie(p_.sh, p_.sw) = r.get_pair("strides", std::pair{p_.kh, p_.kw});
    p_.padding = read_padding(r, "valid");
  }
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 3) spec().fail(fmt::format("{} '{}' needs an image input (H, W, C), got {}", type(), name(), x.str()));
    Shape o = pool2d_output_shape(x, p_);
    if (o[0] <= 0 || o[1] <= 0)
      spec().fail(fmt::format("{} '{}': a {}x{} window does not fit its {}x{} input with padding '{}'", type(), name(), p_.kh,
                              p_.kw, x[0], x[1], padding_name(p_.padding)));
    flops_ = o.numel() * p_.kh * p_.kw;
    return o;
  }
  int64_t flops() const override { return flops_; }
  // Average pooling divides by the window's values inside the input (padding excluded).
  LayerConfig describe() const override {
    LayerConfig c;
    return describe_window(c, "pool", p_.kh, p_.kw, p_.sh, p_.sw, 1, 1, p_.padding);
  }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<Pool2dKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override { k_->forward(*x[0], y, training); }
  void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (dx[0]->defined()) k_->backward(*x[0], y, dy, *dx[0]);
  }

 private:
  Pool2dParams p_;
  int64_t flops_ = 0;
  KernelSlot<Pool2dKernel> k_;
};

struct MaxPool2d final : Pool2d {
  TRAINER_LAYER_CLONE(MaxPool2d)
  explicit MaxPool2d(cfg::MapReader& r) : Pool2d(r, PoolKind::Max) {}
};
struct AvgPool2d final : Pool2d {
  TRAINER_LAYER_CLONE(AvgPool2d)
  explicit AvgPool2d(cfg::MapReader& r) : Pool2d(r, PoolKind::Avg) {}
};

// Keras's GlobalAveragePooling2D / GlobalMaxPooling2D over an image [H, W, C], and the 1D forms
// over a sequence [T, F] (seen as [T, 1, F]): [C] (resp. [F]). Max's gradient goes to the first
// position holding the maximum (TF's argmax), a NaN being the maximum (the global_pool kernels).
template <PoolKind K, int kRank>
class GlobalPool final : public Layer {
 public:
  TRAINER_LAYER_CLONE(GlobalPool)
  explicit GlobalPool(cfg::MapReader&) {}
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != size_t(kRank))
      spec().fail(fmt::format("{} '{}' needs {} input, got {}", type(), name(),
                              kRank == 3 ? "an image [height, width, channels]" : "a sequence [time, features]",
                              in[0].str()));
    flops_ = in[0].numel();
    return {in[0].back()};
  }
  int64_t flops() const override { return flops_; }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<GlobalPoolKernel>(ctx, {K});
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->forward(image(*x[0]), y); }
  void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]->defined()) return;
    Tensor d = image(*dx[0]);
    k_->backward(image(*x[0]), y, dy, d);
  }

 private:
  // A sequence [N, T, F] as the image [N, T, 1, F] the kernel pools.
  static Tensor image(const Tensor& t) {
    if (kRank == 3) return t;
    return t.reshape(Shape{t.dim(0), t.dim(1), 1, t.dim(2)});
  }
  int64_t flops_ = 0;
  KernelSlot<GlobalPoolKernel> k_;
};

RegisterLayer<MaxPool2d> reg_max("max_pool2d", "MaxPooling2D");
RegisterLayer<AvgPool2d> reg_avg("avg_pool2d", "AveragePooling2D");
RegisterLayer<GlobalPool<PoolKind::Avg, 3>> reg_gap("global_avg_pool2d", "GlobalAveragePooling2D");
RegisterLayer<GlobalPool<PoolKind::Max, 3>> reg_gmp("global_max_pool2d", "GlobalMaxPooling2D");
RegisterLayer<GlobalPool<PoolKind::Avg, 2>> reg_gap1("global_avg_pool1d", "GlobalAveragePooling1D");
RegisterLayer<GlobalPool<PoolKind::Max, 2>> reg_gmp1("global_max_pool1d", "GlobalMaxPooling1D");

}  // namespace
}  // namespace trainer
