// The communicators of one process's replicas: LocalComm, or a registered kind (NCCL) for distinct GPUs.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dist/communicator.h"

namespace trainer {

// Makes one communicator per replica for replicas on `devices` with their `contexts`.
using CommunicatorKind = std::function<std::vector<std::unique_ptr<Communicator>>(const std::vector<Device>& devices,
                                                                                  const std::vector<OpContext*>& contexts)>;
// A communicator kind by name ("nccl": core/dist/nccl_comm.cpp registers it in CUDA builds).
void register_communicator_kind(const std::string& name, CommunicatorKind make);

// The same across `processes` processes (mpirun) with devices.size() replicas each: global rank =
// process_rank * devices.size() + local rank. `share` copies bytes from process 0 to every process.
using ShareFromProcess0 = std::function<void(void* data, size_t bytes)>;
using ProcessCommunicatorKind = std::function<std::vector<std::unique_ptr<Communicator>>(
    const std::vector<Device>& devices, const std::vector<OpContext*>& contexts, int process_rank, int processes,
    const ShareFromProcess0& share)>;
void register_process_communicator_kind(const std::string& name, ProcessCommunicatorKind make);
// The registered kind, or an empty function when this build has none of that name.
ProcessCommunicatorKind process_communicator_kind(const std::string& name);

// One communicator per replica: LocalComm for CPU replicas and for one GPU listed several times;
// NCCL for distinct GPUs (TRAINER_COMM=nccl forces it for GPU replicas, e.g. a one-rank NCCL check
// on a one-GPU machine). A DeviceError when NCCL is needed and this build lacks it.
std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& devices,
                                                              const std::vector<OpContext*>& contexts);

}  // namespace trainer
