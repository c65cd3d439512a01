// Pooling layers: max_pool2d, avg_pool2d, max_pool1d, avg_pool1d (Keras MaxPooling2D/AveragePooling2D and 1D), global_avg_pool2d, global_max_pool2d,
// global_avg_pool1d and global_max_pool1d (GlobalAveragePooling2D/1D, GlobalMaxPooling2D/1D).
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/pooling.h"

namespace trainer {
namespace {

// Keras's MaxPooling2D / AveragePooling2D over an image [H, W, C] (kRank 3), and the 1D forms
// MaxPooling1D / AveragePooling1D over a sequence [T, F] (kRank 2), pooled as the one-row image
// [1, T, F] by the same kernels: `pool` (2) and `strides` (the pool size) are one number there.
template <int kRank>
class Pool : public Layer {
 public:
  Pool(cfg::MapReader& r, PoolKind kind) {
    p_.kind = kind;
    if (kRank == 3) {
      std::tie(p_.kh, p_.kw) = r.get_pair("pool", std::pair{2, 2});
      // Keras: strides default to the pool size.
      std::tie(p_.sh, p_.sw) = r.get_pair("strides", std::pair{p_.kh, p_.kw});
    } else {
      p_.kh = p_.sh = 1;
      p_.kw = int(r.get_int("pool", 2, 1, 1 << 16));
      p_.sw = int(r.get_int("strides", p_.kw, 1, 1 << 16));
    }
    p_.padding = read_padding(r, "valid");
  }
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != size_t(kRank))
      spec().fail(fmt::format("{} '{}' needs {} input, got {}", type(), name(),
                              kRank == 3 ? "an image (H, W, C)" : "a sequence (steps, channels)", x.str()));
    const Shape img = kRank == 3 ? x : Shape{1, x[0], x[1]};
    Shape o = pool2d_output_shape(img, p_);
    if (o[0] <= 0 || o[1] <= 0) {
      if (kRank == 3)
        spec().fail(fmt::format("{} '{}': a {}x{} window does not fit its {}x{} input with padding '{}'", type(), name(),
                                p_.kh, p_.kw, x[0], x[1], padding_name(p_.padding)));
      spec().fail(fmt::format("{} '{}': a window of {} does not fit its {} steps with padding '{}'", type(), name(), p_.kw,
                              x[0], padding_name(p_.padding)));
    }
    flops_ = o.numel() * p_.kh * p_.kw;
    return kRank == 3 ? o : Shape{o[1], o[2]};
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
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    Tensor yi = image(y);
    k_->forward(image(*x[0]), yi, training);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]->defined()) return;
    Tensor d = image(*dx[0]);
    k_->backward(image(*x[0]), image(y), image(dy), d);
  }

 private:
  // A sequence [N, T, F] as the one-row image [N, 1, T, F].
  static Tensor image(const Tensor& t) {
    if (kRank == 3) return t;
    return t.reshape(Shape{t.dim(0), 1, t.dim(1), t.dim(2)});
  }
  Pool2dParams p_;
  int64_t flops_ = 0;
  KernelSlot<Pool2dKernel> k_;
};

template <PoolKind K, int kRank>
struct PoolOf final : Pool<kRank> {
  TRAINER_LAYER_CLONE(PoolOf)
  explicit PoolOf(cfg::MapReader& r) : Pool<kRank>(r, K) {}
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

RegisterLayer<PoolOf<PoolKind::Max, 3>> reg_max("max_pool2d", "MaxPooling2D");
RegisterLayer<PoolOf<PoolKind::Avg, 3>> reg_avg("avg_pool2d", "AveragePooling2D");
RegisterLayer<PoolOf<PoolKind::Max, 2>> reg_max1("max_pool1d", "MaxPooling1D");
RegisterLayer<PoolOf<PoolKind::Avg, 2>> reg_avg1("avg_pool1d", "AveragePooling1D");
RegisterLayer<GlobalPool<PoolKind::Avg, 3>> reg_gap("global_avg_pool2d", "GlobalAveragePooling2D");
RegisterLayer<GlobalPool<PoolKind::Max, 3>> reg_gmp("global_max_pool2d", "GlobalMaxPooling2D");
RegisterLayer<GlobalPool<PoolKind::Avg, 2>> reg_gap1("global_avg_pool1d", "GlobalAveragePooling1D");
RegisterLayer<GlobalPool<PoolKind::Max, 2>> reg_gmp1("global_max_pool1d", "GlobalMaxPooling1D");

}  // namespace
}  // namespace trainer
