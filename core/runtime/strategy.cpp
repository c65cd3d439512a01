// The strategy registry.
#include "core/runtime/strategy.h"

#include <map>
#include <mutex>
#include <stdexcept>

namespace trainer {
namespace {

struct Registry {
  std::mutex mu;
  std::map<StrategyKind, StrategyType> types;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_strategy(StrategyKind kind, StrategyType type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.types[kind] = std::move(type);
}

const StrategyType& strategy_type(StrategyKind kind) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.types.find(kind);
  if (it == r.types.end()) throw std::logic_error(std::string("no strategy registered for ") + strategy_name(kind));
  return it->second;
}

}  // namespace trainer
