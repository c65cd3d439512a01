// Optimizer registry and the `optimizer:` section reader.
#include "core/optim/optimizer.h"

#include <fmt/format.h>

#include <map>
#include <regex>

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

void Optimizer::exclude_from_decay(const std::vector<NamedSpan>& params) {
  no_decay_.clear();
  if (exclude_patterns_.empty()) return;
  std::vector<std::regex> res;
  for (const std::string& p : exclude_patterns_) res.emplace_back(p, std::regex::ECMAScript);
  for (const NamedSpan& s : params)
    for (const std::regex& re : res)
      if (s.end > s.begin && std::regex_search(s.name, re)) {
        no_decay_.emplace_back(s.begin, s.end);
        break;
      }
  std::sort(no_decay_.begin(), no_decay_.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& sp : no_decay_) {
    if (!merged.empty() && sp.first <= merged.back().second) merged.back().second = std::max(merged.back().second, sp.second);
    else merged.push_back(sp);
  }
  no_decay_ = std::move(merged);
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
  if (cfg::Node x = r.optional("exclude_from_weight_decay"); x.defined()) {
    if (!x.is_seq()) x.fail("'optimizer.exclude_from_weight_decay' must be a list of name patterns, e.g. [bias, gamma, beta]");
    for (const cfg::Node& p : x.items()) {
      const std::string pat = p.as<std::string>();
      try {
        std::regex check(pat, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        p.fail(fmt::format("'{}' is not a valid pattern (a regular expression searched in parameter names): {}", pat, e.what()));
      }
      if (pat.empty()) p.fail("an empty pattern would match every parameter");
      s.exclude_from_weight_decay.push_back(pat);
    }
  }
  optimizers().at(s.type).read(r, s);
  r.finish();
  return s;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec) {
  auto it = optimizers().find(spec.type);
  if (it == optimizers().end()) throw std::logic_error("make_optimizer: unknown type " + spec.type);
  std::unique_ptr<Optimizer> o = it->second.make(spec);
  o->exclude_patterns_ = spec.exclude_from_weight_decay;
  return o;
}

}  // namespace trainer
