// The CUDA GPU backend of core/ops/inventory.h: devices and inventory through the CUDA runtime (versions, peer access) and NCCL (its version).
#include "core/ops/cuda/cuda_devices.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>
#include <nccl.h>

namespace trainer {
namespace {

// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

// NCCL encodes 2.9 and later as 10000 * major + 100 * minor + patch, earlier as 1000 * major + ...
std::string nccl_version(int v) {
  if (v >= 20900) return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
  return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
}

GpuInventory cuda_inventory() {
  GpuInventory inv;
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) inv.driver = cuda_version(v);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) inv.runtime = cuda_version(v);
  if (ncclGetVersion(&v) == ncclSuccess) inv.nccl = nccl_version(v);
  inv.cudnn = cudnn_version_string(cudnnGetVersion());  // the library loaded (PyTorch's wheel's on the GPU machine)
  inv.gpus = cuda_devices(&inv.why);
  size_t n = inv.gpus.size();
  if (n >= 2) {
    inv.peer.assign(n, std::vector<bool>(n, false));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        int can = 0;
        if (i != j && cudaDeviceCanAccessPeer(&can, inv.gpus[i].index, inv.gpus[j].index) == cudaSuccess)
          inv.peer[i][j] = can != 0;
      }
    cudaGetLastError();  // leave no error behind for later calls
  }
  return inv;
}

[[maybe_unused]] const bool registered = (register_gpu_backend({cuda_devices, cuda_inventory}), true);

}  // namespace

std::string cudnn_version_string(size_t v) {
  if (v >= 90000) return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
  return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
}

}  // namespace trainer
