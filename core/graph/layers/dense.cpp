// dense layer (Keras Dense) over the last axis: a flat input, or each position of a sequence [time, features].
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/dense.h"

namespace trainer {
namespace {

class Dense final : public KernelBiasLayer<DenseKernel> {
 public:
  TRAINER_LAYER_CLONE(Dense)
  explicit Dense(cfg::MapReader& r) {
    p_.units = r.get_int("units", std::nullopt, 1, 1 << 24);
    p_.bias = r.get<bool>("use_bias", true);
    init_ = read_init(r, "kernel_initializer", "glorot_uniform");
  }
  // [features] -> [units]; a sequence [time, features] -> [time, units], the same kernel at every
  // position (Keras). An image is refused (Keras would apply it to each pixel: here that is a 1x1
  // conv2d; forgetting the flatten is the usual cause).
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != 1 && in[0].rank() != 2)
      spec().fail(fmt::format("dense '{}' needs a flat input or a sequence [time, features], got {}; put a flatten "
                              "or global_avg_pool2d layer before it",
                              name(), in[0].str()));
    k_in_ = in[0].back();
    positions_ = in[0].numel() / k_in_;
    return dense_output_shape(in[0], p_);
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> ps{{"kernel", Shape{k_in_, p_.units}, init_, true, k_in_, p_.units}};
    if (p_.bias) ps.push_back({"bias", Shape{p_.units}, InitKind::Zeros, true});
    return ps;
  }
  int64_t flops() const override { return 2 * positions_ * k_in_ * p_.units; }
  LayerConfig describe() const override { return LayerConfig().put_int("units", p_.units).put_int("use_bias", p_.bias); }
 private:
  InitKind init_;
  int64_t k_in_ = 0, positions_ = 1;
};

RegisterLayer<Dense> reg("dense", "Dense");

}  // namespace
}  // namespace trainer
