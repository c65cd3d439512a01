// CUDA device discovery through the runtime API; "no driver" and "no device" mean zero GPUs.
#include <cuda_runtime.h>

#include "core/ops/cuda/cuda_devices.h"

namespace trainer {

bool cuda_compiled() { return true; }

std::vector<GpuInfo> cuda_devices(std::string* why) {
  std::vector<GpuInfo> out;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    // cudaErrorInsufficientDriver (runtime without a driver, as on CI) and cudaErrorNoDevice
    // both mean this process can use no GPU.
    if (why) *why = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error state
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.totalGlobalMem, p.major, p.minor});
  }
  if (out.empty() && why) *why = "no CUDA device is visible";
  return out;
}

}  // namespace trainer
