// NcclComm: replicas on distinct GPUs, of one process or across processes (mpirun) — gradient all-reduce,
// broadcast and host reductions through NCCL on each replica's stream, errors with NCCL's message.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "core/dist/device_comms.h"

namespace trainer {

// One communicator per device (distinct GPUs, one per replica, in rank order); `contexts` are
// the replicas' CudaContexts (their streams carry the collectives).
std::vector<std::unique_ptr<Communicator>> make_nccl_comms(const std::vector<Device>& devices,
                                                           const std::vector<OpContext*>& contexts);


// The same for a run of `processes` processes (mpirun) with devices.size() GPUs each: global rank
// = process_rank * devices.size() + local rank, so size() is processes * devices.size(). Process
// 0's NCCL unique id reaches the others through `share`: every process calls this from one
// thread, in the same order. make_process_communicators (process_comm.h) is the usual way in.
std::vector<std::unique_ptr<Communicator>> make_nccl_process_comms(const std::vector<Device>& devices,
                                                                   const std::vector<OpContext*>& contexts, int process_rank,
                                                                   int processes, const ShareFromProcess0& share);

}  // namespace trainer
