// Device selection: turns the config's/CLI's request into this run's replicas (devices and
// compute threads) and their communicators, or a DeviceError (exit code 4) that says what is
// visible.
#pragma once
#include <memory>
#include <vector>

#include "core/dist/communicator.h"
#include "core/engine/experiment.h"
#include "core/tensor/device.h"

namespace trainer {

std::vector<Device> select_devices(const DeviceRequest& r);
// CPU compute threads per replica: the request's, else the machine's cores shared evenly.
int threads_per_replica(const DeviceRequest& r, int replicas);
// One communicator per replica: LocalComm for CPU replicas and for one GPU listed several
// times; NCCL for distinct GPUs.
std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& devices,
                                                              const std::vector<OpContext*>& contexts);
// `trainer devices`: the CPU (cores, model, oneDNN's ISA, AVX-512/BF16/AMX) and each visible GPU
// (name, memory, compute capability; CUDA and NCCL versions; the peer-access matrix with 2+
// GPUs), or a line saying why no GPU is visible. As lines, or as one JSON object.
std::vector<std::string> describe_devices();
std::string describe_devices_json();

}  // namespace trainer
