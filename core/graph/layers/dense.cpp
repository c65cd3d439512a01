// dense layer (Keras Dense) on a flat input.
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
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != 1)
      spec().fail(fmt::format("dense '{}' needs a flat input, got {}; put a flatten or global_avg_pool2d layer before it",
                              name(), in[0].str()));
    k_in_ = in[0][0];
    return {p_.units};
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> ps{{"kernel", Shape{k_in_, p_.units}, init_, true, k_in_, p_.units}};
    if (p_.bias) ps.push_back({"bias", Shape{p_.units}, InitKind::Zeros, true});
    return ps;
  }
  int64_t flops() const override { return 2 * k_in_ * p_.units; }
  LayerConfig describe() const override { return LayerConfig().put_int("units", p_.units).put_int("use_bias", p_.bias); }
 private:
  InitKind init_;
  int64_t k_in_ = 0;
};

RegisterLayer<Dense> reg("dense", "Dense");

}  // namespace
}  // namespace trainer
