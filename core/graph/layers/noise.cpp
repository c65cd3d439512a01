// gaussian_noise and gaussian_dropout layers (Keras GaussianNoise, GaussianDropout): regularising noise in training, the identity in inference.
#include <fmt/format.h>

#include <cmath>

#include "core/graph/layers/common.h"
#include "core/ops/noise.h"

namespace trainer {
namespace {

// Keras's GaussianNoise(stddev) (kMultiplicative false: x + stddev·z) and GaussianDropout(rate)
// (true: x·(1 + sqrt(rate / (1 - rate))·z)), z standard normal per element and step (the noise op).
// Its backward draws the same z again (nothing kept); GaussianNoise's passes dy through.
template <bool kMultiplicative>
class GaussianNoise final : public Layer {
 public:
  TRAINER_LAYER_CLONE(GaussianNoise)
  explicit GaussianNoise(cfg::MapReader& r) {
    if (kMultiplicative) {
      rate_ = float(r.get_float("rate", std::nullopt, 0.0, 0.999));
      p_.stddev = float(std::sqrt(double(rate_) / (1.0 - double(rate_))));
    } else {
      p_.stddev = float(r.get_float("stddev", std::nullopt, 0.0, 1e6));
    }
    p_.multiplicative = kMultiplicative;
  }
  Shape infer(const std::vector<Shape>& in) override { return in[0]; }
  LayerConfig describe() const override {
    return kMultiplicative ? LayerConfig().put_real("rate", rate_) : LayerConfig().put_real("stddev", p_.stddev);
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    if (p_.stddev > 0.0f) k_ = make_kernel<NoiseKernel>(ctx, p_);
  }
  void set_step_seed(uint64_t seed) override { seed_.set(seed); }
  void set_step_scalars(const StepScalars* step, uint64_t node) override { seed_.set(step, node); }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    training_ = training && k_;
    if (training_) k_->forward(*x[0], y, seed_.get());
    else ctx().copy(y.data(), x[0]->data(), y.bytes());
  }
  void backward(const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]->defined()) return;
    if (training_) k_->backward(dy, *dx[0], seed_.get());
    else ctx().copy(dx[0]->data(), dy.data(), dy.bytes());
  }

 private:
  NoiseParams p_;
  float rate_ = 0.0f;
  StepSeed seed_;
  bool training_ = false;
  KernelSlot<NoiseKernel> k_;
};

RegisterLayer<GaussianNoise<false>> reg_noise("gaussian_noise", "GaussianNoise");
RegisterLayer<GaussianNoise<true>> reg_dropout("gaussian_dropout", "GaussianDropout");

}  // namespace
}  // namespace trainer
