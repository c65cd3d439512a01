// Optimizer registry and the `optimizer:` section reader.
#include "core/optim/optimizer.h"

#include <map>

namespace trainer {

static std::map<std::string, OptimizerType>& optimizers() {
  static std::map<std::string, OptimizerType> t;
  return t;
}

void Optimizer::bind(OpContext& ctx, Tensor weights, Tensor grads) {
  if (weights.numel() != grads.numel()) throw std::logic_error("optimizer: weights and gradients differ in length");
  weights_ = weights;
  grads_ = grads;
  k_ = make_kernel<OptimUpdateKernel>(ctx, {});
  allocate_state(ctx, weights.numel());
}

void register_optimizer(const std::string& type, OptimizerType t) { optimizers()[type] = std::move(t); }

std::vector<std::string> optimizer_types() {
  std::vector<std::string> types;
  for (const auto& [k, v] : optimizers()) types.push_back(k);
  return types;
}

OptimizerSpec read_optimizer(const cfg::Node& section) {
  cfg::MapReader r(section, "the optimizer section");
  OptimizerSpec s;
  s.node = section;
  s.type = r.get_choice("type", optimizer_types(), "sgd");
  s.lr_scaling = r.get_choice("lr_scaling", {"none", "linear"}, "none");
  s.convention = r.get_choice("convention", {"keras", "pytorch"}, "keras") == "keras" ? OptimConvention::Keras
                                                                                 : OptimConvention::PyTorch;
  optimizers().at(s.type).read(r, s);
  r.finish();
  return s;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec) {
  auto it = optimizers().find(spec.type);
  if (it == optimizers().end()) throw std::logic_error("make_optimizer: unknown type " + spec.type);
  return it->second.make(spec);
}

}  // namespace trainer
