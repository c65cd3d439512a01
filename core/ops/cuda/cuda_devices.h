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

}  // namespace trainer
