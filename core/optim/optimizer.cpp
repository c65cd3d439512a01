// Optimizer registry and the `optimizer:` section reader.
#include "core/optim/optimizer.h"

#include <map>

namespace trainer {

static std::map<std::string, OptimizerFactory>& optimizers() {
  static std::map<std::string, OptimizerFactory> t;
  return t;
}

void Optimizer::bind(OpContext& ctx, Tensor weights, Tensor grads) {
  if (weights.numel() != grads.numel()) throw std::logic_error("optimizer: weights and gradients differ in length");
  weights_ = weights;
  grads_ = grads;
  k_ = make_kernel<OptimUpdateKernel>(ctx, {});
  allocate_state(ctx, weights.numel());
}

void register_optimizer(const std::string& type, OptimizerFactory f) { optimizers()[type] = std::move(f); }

std::unique_ptr<Optimizer> make_optimizer(const cfg::Node& section) {
  cfg::MapReader r(section, "the optimizer section");
  std::vector<std::string> types;
  for (const auto& [k, v] : optimizers()) types.push_back(k);
  std::string type = r.get_choice("type", types, "sgd");
  r.allow({"lr_scaling"});  // read by the engine (data parallelism)
  auto opt = optimizers().at(type)(r);
  r.finish();
  return opt;
}

}  // namespace trainer
