// SGD with momentum, Nesterov momentum and weight decay: Keras 3's velocity and decoupled decay, or PyTorch's buffer and L2 (optimizer.convention).
#include <fmt/format.h>

#include "core/optim/optimizer.h"

namespace trainer {
namespace {

class Sgd final : public Optimizer {
 public:
  static void read(cfg::MapReader& r, OptimizerSpec& s) {
    s.lr = r.get_float("lr", s.convention == OptimConvention::Keras ? 0.01 : 1e-3, 0.0, 1e6);  // Keras's, torch.optim.SGD's
    s.momentum = r.get_float("momentum", 0.0, 0.0, 1.0);
    s.nesterov = r.get<bool>("nesterov", false);
    s.weight_decay = r.get_float("weight_decay", 0.0, 0.0, 1.0);
    if (s.nesterov && s.momentum == 0) r.required("nesterov").fail("nesterov needs momentum > 0");
  }
  explicit Sgd(const OptimizerSpec& s)
      : momentum_(float(s.momentum)), wd_(float(s.weight_decay)), nesterov_(s.nesterov), convention_(s.convention) {
    lr_ = s.lr;
  }
  void allocate_state(OpContext& ctx, int64_t n) override { velocity_ = ctx.zeros(Shape{n}); }
  void update(int64_t begin, int64_t end, float lr, float scale) override {
    by_decay(begin, end, [&](int64_t b, int64_t e, bool decays) {
      Tensor w = range(weights_, b, e), v = range(velocity_, b, e);
      k_->sgd(w, range(grads_, b, e), v, SgdStep{lr, momentum_, decays ? wd_ : 0.0f, scale, nesterov_, convention_});
    });
  }
  void update_from(int64_t begin, int64_t end, const StepScalars* step) override {
    by_decay(begin, end, [&](int64_t b, int64_t e, bool decays) {
      Tensor w = range(weights_, b, e), v = range(velocity_, b, e);
      k_->sgd(w, range(grads_, b, e), v, SgdStep{0.0f, momentum_, decays ? wd_ : 0.0f, 0.0f, nesterov_, convention_, step});
    });
  }
  std::vector<std::pair<std::string, Tensor*>> state() override { return {{"momentum", &velocity_}}; }
  std::string describe() const override {
    return fmt::format("SGD(lr={:g}, momentum={:g}{}, weight_decay={:g}, convention={})", lr_, momentum_,
                       nesterov_ ? ", nesterov" : "", wd_, convention_name(convention_));
  }

 private:
  float momentum_, wd_;
  bool nesterov_;
  OptimConvention convention_;
  Tensor velocity_;
};

const bool reg = (register_optimizer("sgd", {Sgd::read, [](const OptimizerSpec& s) { return std::unique_ptr<Optimizer>(new Sgd(s)); }}),
                  true);

}  // namespace
}  // namespace trainer
