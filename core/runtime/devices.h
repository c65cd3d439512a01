// Device selection: turns the config's/CLI's request into this run's replicas (devices and
// compute threads) and their communicators, or a DeviceError (exit code 4) that says what is
// visible.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/io/config.h"
#include "core/tensor/device.h"

namespace trainer {

// The `devices:` section (and --gpus / --cpu / --threads, which the CLI turns into overrides of it).
struct DevicesSpec {
  std::vector<int> gpus;  // empty: CPU
  bool all_gpus = false;  // `gpus: all`: every visible GPU
  int cpu_replicas = 1;
  int threads = 0;        // CPU compute threads per replica (0: every core)
  bool tf32 = true;       // GPU fp32: TF32 tensor cores (as PyTorch's cuDNN and TF); false: strict fp32
  int64_t workspace_mb = 0;  // GPU convolution workspace budget in MiB (0: 1/16 of the device memory, <= 4 GiB)
  bool cuda_graphs = true;   // GPU: a step recorded once as a CUDA graph and replayed (where it can be)
  cfg::Node node;         // the section, for messages
};
DevicesSpec read_devices(const cfg::Node& section);

std::vector<Device> select_devices(const DevicesSpec& r);
// CPU compute threads per replica: the request's, else the machine's cores shared evenly, less
// `reserved` cores kept for other threads that keep one busy (a GPU stage's driving thread).
int threads_per_replica(const DevicesSpec& r, int replicas, int reserved = 0);
// `trainer devices`: the CPU (cores, model, oneDNN's ISA, AVX-512/BF16/AMX) and each visible GPU
// (name, memory, compute capability; CUDA and NCCL versions; the peer-access matrix with 2+
// GPUs), or a line saying why no GPU is visible. As lines, or as one JSON object.
std::vector<std::string> describe_devices();
std::string describe_devices_json();

}  // namespace trainer
