// Adam and AdamW with bias correction: Keras 3's epsilon hat and decoupled decay, or PyTorch's (optimizer.convention).
#include <fmt/format.h>

#include <cmath>

#include "core/optim/optimizer.h"

namespace trainer {
namespace {

class Adam final : public Optimizer {
 public:
  static void read(cfg::MapReader& r, OptimizerSpec& s, bool decoupled) {
    s.lr = r.get_float("lr", 1e-3, 0.0, 1e6);
    s.beta1 = r.get_float("beta1", 0.9, 0.0, 0.999999);
    s.beta2 = r.get_float("beta2", 0.999, 0.0, 0.9999999);
    // The convention's defaults: Keras's epsilon 1e-7, torch.optim's 1e-8.
    s.epsilon = r.get_float("epsilon", s.convention == OptimConvention::Keras ? 1e-7 : 1e-8, 0.0, 1.0);
    // AdamW's default: Keras 0.004, PyTorch 0.01.
    const double wd = decoupled ? (s.convention == OptimConvention::Keras ? 0.004 : 0.01) : 0.0;
    s.weight_decay = r.get_float("weight_decay", wd, 0.0, 1.0);
  }
  // Keras's weight decay is decoupled on Adam too (Adam(weight_decay=...) is AdamW).
  Adam(const OptimizerSpec& s, bool adamw)
      : adamw_(adamw), decoupled_(adamw || s.convention == OptimConvention::Keras), convention_(s.convention), b1_(float(s.beta1)), b2_(float(s.beta2)), eps_(float(s.epsilon)), wd_(float(s.weight_decay)) {
    lr_ = s.lr;
  }
  void allocate_state(OpContext& ctx, int64_t n) override {
    m_ = ctx.zeros(Shape{n});
    v_ = ctx.zeros(Shape{n});
  }
  void update(int64_t begin, int64_t end, float lr, float scale) override {
    float bias1 = float(1.0 - std::pow(double(b1_), double(steps_)));
    float bias2 = float(1.0 - std::pow(double(b2_), double(steps_)));
    by_decay(begin, end, [&](int64_t b, int64_t e, bool decays) {
      Tensor w = range(weights_, b, e), m = range(m_, b, e), v = range(v_, b, e);
      k_->adam(w, range(grads_, b, e), m, v,
               AdamStep{lr, b1_, b2_, eps_, decays ? wd_ : 0.0f, scale, decoupled_, bias1, bias2, convention_});
    });
  }
  void update_from(int64_t begin, int64_t end, const StepScalars* step) override {
    by_decay(begin, end, [&](int64_t b, int64_t e, bool decays) {
      Tensor w = range(weights_, b, e), m = range(m_, b, e), v = range(v_, b, e);
      k_->adam(w, range(grads_, b, e), m, v,
               AdamStep{0.0f, b1_, b2_, eps_, decays ? wd_ : 0.0f, 0.0f, decoupled_, 1.0f, 1.0f, convention_, step});
    });
  }
  void step_scalars(StepScalars& s, float lr, float grad_scale) const override {
    Optimizer::step_scalars(s, lr, grad_scale);
    bias_at(steps_, s.bias1, s.bias2);
  }
  void bias_at(int64_t t, float& bias1, float& bias2) const override {
    bias1 = float(1.0 - std::pow(double(b1_), double(t)));
    bias2 = float(1.0 - std::pow(double(b2_), double(t)));
  }
  std::vector<std::pair<std::string, Tensor*>> state() override { return {{"m", &m_}, {"v", &v_}}; }
  std::string describe() const override {
    return fmt::format("{}(lr={:g}, beta1={:g}, beta2={:g}, epsilon={:g}, weight_decay={:g}{}, convention={})",
                       adamw_ ? "AdamW" : "Adam", lr_, b1_, b2_, eps_, wd_, wd_ == 0 ? "" : decoupled_ ? " decoupled" : " L2",
                       convention_name(convention_));
  }

 private:
  bool adamw_, decoupled_;
  OptimConvention convention_;
  float b1_, b2_, eps_, wd_;
  Tensor m_, v_;
};

template <bool Decoupled>
OptimizerType adam_type() {
  return {[](cfg::MapReader& r, OptimizerSpec& s) { Adam::read(r, s, Decoupled); },
          [](const OptimizerSpec& s) { return std::unique_ptr<Optimizer>(new Adam(s, Decoupled)); }};
}

const bool reg = (register_optimizer("adam", adam_type<false>()), register_optimizer("adamw", adam_type<true>()), true);

}  // namespace
}  // namespace trainer
