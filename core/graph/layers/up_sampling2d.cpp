// up_sampling2d layer (Keras UpSampling2D): each pixel repeated size_h x size_w times (nearest neighbour) or interpolated (bilinear), and its gradient summed back.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/upsample.h"

namespace trainer {
namespace {

class UpSampling2d final : public Layer {
 public:
  TRAINER_LAYER_CLONE(UpSampling2d)
  explicit UpSampling2d(cfg::MapReader& r) {
    std::tie(p_.sh, p_.sw) = r.get_pair("size", std::pair{2, 2});
    if (p_.sh < 1 || p_.sw < 1 || p_.sh > 1024 || p_.sw > 1024)
      r.required("size").fail("'size' must be between 1 and 1024 (an int or [rows, columns])");
    // Keras's default nearest, and bilinear; its bicubic, lanczos3, lanczos5 and area are not here.
    p_.bilinear = r.get_choice("interpolation", {"nearest", "bilinear"}, "nearest") == "bilinear";
  }
  Shape infer(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 3) spec().fail(fmt::format("up_sampling2d '{}' needs an image input (H, W, C), got {}", name(), x.str()));
    out_ = Shape{x[0] * p_.sh, x[1] * p_.sw, x[2]};
    return out_;
  }
  int64_t flops() const override { return (p_.bilinear ? 8 : 1) * out_.numel(); }
  LayerConfig describe() const override {
    return LayerConfig().put_int("size_h", p_.sh).put_int("size_w", p_.sw).put_text("interpolation",
                                                                                     p_.bilinear ? "bilinear" : "nearest");
  }
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  bool output_reusable() const override { return true; }  // backward reads neither x nor y
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<UpsampleKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->forward(*x[0], y); }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (dx[0]->defined()) k_->backward(dy, *dx[0]);
  }

 private:
  UpsampleParams p_;
  Shape out_;
  KernelSlot<UpsampleKernel> k_;
};

RegisterLayer<UpSampling2d> reg("up_sampling2d", "UpSampling2D");

}  // namespace
}  // namespace trainer
