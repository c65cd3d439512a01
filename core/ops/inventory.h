// The GPUs a process can use and what `trainer devices` reports about them, through whichever GPU backend registered itself (none: no GPU, and why).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace trainer {

struct GpuInfo {
  int index = 0;
  std::string name;
  size_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;
};

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  std::string why;              // why `gpus` is empty (the backend's error string, or no backend)
  std::string driver, runtime;  // "13.0"; driver is "" when there is no driver
  std::string nccl;             // "2.28.9", or "" when NCCL cannot say
  std::string cudnn;            // "9.19.0": the cuDNN library loaded ("" without the CUDA backend)
  // peer[i][j]: GPU i can access GPU j's memory; filled with 2+ GPUs.
  std::vector<std::vector<bool>> peer;
};

// A GPU backend's discovery (core/ops/cuda registers CUDA's): the visible GPUs (never throws; no
// driver or device gives none and `why`), and the full inventory with versions and peer access.
struct GpuBackend {
  std::function<std::vector<GpuInfo>(std::string* why)> devices;
  std::function<GpuInventory()> inventory;
};
void register_gpu_backend(GpuBackend b);

// Through the registered backend; without one, no GPU and a `why` that says the build has none.
std::vector<GpuInfo> visible_gpus(std::string* why = nullptr);
GpuInventory gpu_inventory();

}  // namespace trainer
