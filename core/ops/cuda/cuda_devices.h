// CUDA device discovery: how many GPUs this process can use (zero when there is no driver).
#pragma once
#include <string>
#include <vector>

#include "core/ops/inventory.h"

namespace trainer {

// True when this build has the CUDA backend compiled in.
bool cuda_compiled();
// The GPUs visible to this process (respects CUDA_VISIBLE_DEVICES). No driver or no device
// gives an empty list and `why` says so; never throws for that.
std::vector<GpuInfo> cuda_devices(std::string* why = nullptr);
// cudnnGetVersion()'s number as "major.minor.patch" (9.x: 10000·major + 100·minor + patch; 8.x:
// 1000·major + 100·minor + patch).
std::string cudnn_version_string(size_t v);

}  // namespace trainer
