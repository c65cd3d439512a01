// RMSprop (rho 0.9, epsilon 1e-7, optional momentum and centering): Keras 3's epsilon inside the root and decoupled decay, or PyTorch's (optimizer.convention).
#include <fmt/format.h>

#include "core/optim/optimizer.h"

namespace trainer {
namespace {

class Rmsprop final : public Optimizer {
 public:
  static void read(cfg::MapReader& r, OptimizerSpec& s) {
    // The convention's defaults: Keras's lr 0.001, rho 0.9, epsilon 1e-7; torch.optim.RMSprop's
    // lr 0.01, alpha 0.99, eps 1e-8.
    const bool keras = s.convention == OptimConvention::Keras;
    s.lr = r.get_float("lr", keras ? 1e-3 : 1e-2, 0.0, 1e6);
    s.rho = r.get_float("rho", keras ? 0.9 : 0.99, 0.0, 1.0);
    s.momentum = r.get_float("momentum", 0.0, 0.0, 1.0);
    s.epsilon = r.get_float("epsilon", keras ? 1e-7 : 1e-8, 0.0, 1.0);
    s.weight_decay = r.get_float("weight_decay", 0.0, 0.0, 1.0);
    s.centered = r.get<bool>("centered", false);
  }
  explicit Rmsprop(const OptimizerSpec& s)
      : rho_(float(s.rho)), momentum_(float(s.momentum)), eps_(float(s.epsilon)), wd_(float(s.weight_decay)),
        centered_(s.centered), convention_(s.convention) {
    lr_ = s.lr;
  }
  void allocate_state(OpContext& ctx, int64_t n) override {
    ms_ = ctx.zeros(Shape{n});
    mom_ = ctx.zeros(Shape{n});
    mg_ = ctx.zeros(Shape{n});
  }
  void update(int64_t begin, int64_t end, float lr, float scale) override {
    by_decay(begin, end, [&](int64_t b, int64_t e, bool decays) {
      Tensor w = range(weights_, b, e), ms = range(ms_, b, e), mom = range(mom_, b, e), mg = range(mg_, b, e);
      k_->rmsprop(w, range(grads_, b, e), ms, mom, mg,
                  RmspropStep{lr, rho_, momentum_, eps_, decays ? wd_ : 0.0f, scale, centered_, convention_});
    });
  }
  void update_from(int64_t begin, int64_t end, const StepScalars* step) override {
    by_decay(begin, end, [&](int64_t b, int64_t e, bool decays) {
      Tensor w = range(weights_, b, e), ms = range(ms_, b, e), mom = range(mom_, b, e), mg = range(mg_, b, e);
      k_->rmsprop(w, range(grads_, b, e), ms, mom, mg,
                  RmspropStep{0.0f, rho_, momentum_, eps_, decays ? wd_ : 0.0f, 0.0f, centered_, convention_, step});
    });
  }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    return {{"mean_square", &ms_}, {"momentum", &mom_}, {"mean_grad", &mg_}};
  }
  std::string describe() const override {
    return fmt::format("RMSprop(lr={:g}, rho={:g}, momentum={:g}, epsilon={:g}{}, weight_decay={:g}, convention={})", lr_,
                       rho_, momentum_, eps_, centered_ ? ", centered" : "", wd_, convention_name(convention_));
  }

 private:
  float rho_, momentum_, eps_, wd_;
  bool centered_;
  OptimConvention convention_;
  Tensor ms_, mom_, mg_;
};

const bool reg = (register_optimizer("rmsprop", {Rmsprop::read, [](const OptimizerSpec& s) {
                    return std::unique_ptr<Optimizer>(new Rmsprop(s));
                  }}),
                  true);

}  // namespace
}  // namespace trainer
