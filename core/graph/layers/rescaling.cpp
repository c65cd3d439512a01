// rescaling layer (Keras Rescaling): y = x·scale + offset, one scale and offset or one per channel; no weights.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/rescale.h"

namespace trainer {
namespace {

// Keras's Rescaling(scale, offset=0.0): `{type: rescaling, scale: 0.00392156862745098}` (1/255), or
// per channel `{type: rescaling, scale: [0.0171, 0.0175, 0.0174], offset: [-2.12, -2.04, -1.80]}`
// (a list as long as the last axis; a list of one is the single value).
class Rescaling final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Rescaling)
  MixedPrecision mixed_precision() const override { return MixedPrecision::Follow; }
  bool output_reusable() const override { return true; }  // backward reads neither x nor y
  bool in_place() const override { return true; }
  explicit Rescaling(cfg::MapReader& r) {
    scale_node_ = r.required("scale");
    p_.scale = values(scale_node_, "scale");
    const cfg::Node offset = r.optional("offset");
    p_.offset = offset.defined() ? values(offset, "offset") : std::vector<float>{0.0f};
    if (p_.offset.size() == 1 && p_.scale.size() > 1) p_.offset.assign(p_.scale.size(), p_.offset[0]);
    if (p_.scale.size() == 1 && p_.offset.size() > 1) p_.scale.assign(p_.offset.size(), p_.scale[0]);
    if (p_.scale.size() != p_.offset.size())
      offset.fail(fmt::format("rescaling: {} offsets for {} scales (one each, or one per channel)", p_.offset.size(),
                              p_.scale.size()));
  }
  Shape infer(const std::vector<Shape>& in) override {
    if (p_.scale.size() > 1 && (in[0].rank() == 0 || in[0].back() != int64_t(p_.scale.size())))
      scale_node_.fail(fmt::format("rescaling '{}': {} values per channel, but its input {} has {} channels", name(),
                                   p_.scale.size(), in[0].keras_str(), in[0].rank() ? in[0].back() : 0));
    elems_ = in[0].numel();
    return in[0];
  }
  int64_t flops() const override { return 2 * elems_; }
  LayerConfig describe() const override {
    LayerConfig c;
    c.put_int("channels", int64_t(p_.scale.size()));
    for (size_t i = 0; i < p_.scale.size(); ++i)
      c.put_real(fmt::format("scale_{}", i), p_.scale[i]).put_real(fmt::format("offset_{}", i), p_.offset[i]);
    return c;
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<RescaleKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool) override { k_->forward(*x[0], y); }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (dx[0]->defined()) k_->backward(dy, *dx[0]);
  }

 private:
  static std::vector<float> values(const cfg::Node& n, const char* what) {
    std::vector<float> v;
    for (const cfg::Node& e : n.items()) {
      const double d = e.as<double>();
      if (!std::isfinite(d) || std::fabs(d) > 1e30) e.fail(fmt::format("rescaling: {} must be finite and within ±1e30, got {}", what, d));
      v.push_back(float(d));
    }
    if (v.empty()) n.fail(fmt::format("rescaling: {} needs a value (or one per channel)", what));
    return v;
  }
  cfg::Node scale_node_;
  RescaleParams p_;
  int64_t elems_ = 0;
  KernelSlot<RescaleKernel> k_;
};

RegisterLayer<Rescaling> reg("rescaling", "Rescaling");

}  // namespace
}  // namespace trainer
