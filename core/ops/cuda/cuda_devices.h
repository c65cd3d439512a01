// CUDA device discovery: how many GPUs this process can use (zero when there is no driver).
#pragma once
#include <string>
#include <vector>

namespace trainer {

struct GpuInfo {
  int index = 0;
  std::string name;
  size_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;
};

// True when this build has the CUDA backend compiled in.
bool cuda_compiled();
// The GPUs visible to this process (respects CUDA_VISIBLE_DEVICES). No driver or no device
// gives an empty list and `why` says so; never throws for that.
std::vector<GpuInfo> cuda_devices(std::string* why = nullptr);

}  // namespace trainer
