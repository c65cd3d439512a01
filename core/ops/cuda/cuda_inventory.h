// What `trainer devices` reports about the GPUs: each visible device, the CUDA driver, runtime and
// NCCL versions, and which pairs of devices can read each other's memory (peer access).
#pragma once
#include <string>
#include <vector>

#include "core/ops/cuda/cuda_devices.h"

namespace trainer {

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  std::string why;              // why `gpus` is empty (the CUDA error string)
  std::string driver, runtime;  // "13.0"; driver is "" when there is no driver
  std::string nccl;             // "2.28.9", or "" when NCCL cannot say
  // peer[i][j]: GPU i can access GPU j's memory (cudaDeviceCanAccessPeer); filled with 2+ GPUs.
  std::vector<std::vector<bool>> peer;
};

// Never throws; a missing driver or device gives no GPUs and `why`.
GpuInventory gpu_inventory();

}  // namespace trainer
