// The cuDNN workspace budget as a pure function of the device's total memory and the config (no CUDA: CPU-tested).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace trainer::cuda {

constexpr size_t kWorkspaceMiB = size_t(1) << 20;
// TensorFlow's default limit on one convolution's scratch memory.
constexpr size_t kAutoWorkspaceCap = size_t(4096) << 20;
// The automatic budget's share of the device: 1/16 (5 GiB of an 80 GB H100, capped at 4 GiB; 1 GiB
// of a 16 GB card).
constexpr size_t kAutoWorkspaceShare = 16;

// The most workspace one convolution algorithm may ask for: devices.workspace_mb when set (> 0),
// else 1/16 of the device's total memory, at most kAutoWorkspaceCap, rounded down to whole MiB.
// It never depends on the memory free at the moment: the algorithm chosen for a shape (and with it
// the result's bits) must not change because another process shares the GPU, or because the
// caching allocator holds more or less at the moment of the choice (resume is bit-identical only
// if every run of a config picks the same algorithms on the same card).
inline size_t workspace_budget(size_t total_device_bytes, int64_t workspace_mb) {
  if (workspace_mb > 0) return size_t(workspace_mb) * kWorkspaceMiB;
  const size_t share = std::min(kAutoWorkspaceCap, total_device_bytes / kAutoWorkspaceShare);
  return share / kWorkspaceMiB * kWorkspaceMiB;
}

}  // namespace trainer::cuda
