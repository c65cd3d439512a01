// StrategyKind: how a run spreads the model over its devices (`strategy:` in the config).
#pragma once
#include <string>

namespace trainer {

// data_parallel: a replica per device, the batch split, gradients summed; device_parallel: the
// model's layers placed on devices (`placement:`), optionally pipelined in micro-batches.
enum class StrategyKind { DataParallel, DeviceParallel };

inline const char* strategy_name(StrategyKind k) {
  return k == StrategyKind::DeviceParallel ? "device_parallel" : "data_parallel";
}

}  // namespace trainer
