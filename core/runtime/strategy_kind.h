// StrategyKind: how a run spreads the model over its devices (`strategy:` in the config).
#pragma once
#include <string>

namespace trainer {

// data_parallel: a replica per device, the batch split, gradients summed; device_parallel: the
// model's layers placed on devices (`placement:`), optionally pipelined in micro-batches; hybrid:
// data parallel over R copies of that pipeline (R x S devices).
enum class StrategyKind { DataParallel, DeviceParallel, Hybrid };

inline const char* strategy_name(StrategyKind k) {
  return k == StrategyKind::DeviceParallel ? "device_parallel" : k == StrategyKind::Hybrid ? "hybrid" : "data_parallel";
}
// Whether the model is cut over devices by `placement:` (device_parallel, hybrid).
inline bool placed(StrategyKind k) { return k != StrategyKind::DataParallel; }

}  // namespace trainer
