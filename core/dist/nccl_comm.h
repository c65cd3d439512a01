// NcclComm: replicas on distinct GPUs of one process (ncclCommInitAll) — gradient all-reduce,
// broadcast and host reductions through NCCL on each replica's stream, errors with NCCL's message.
#pragma once
#include <memory>
#include <vector>

#include "core/dist/communicator.h"

namespace trainer {

// One communicator per device (distinct GPUs, one per replica, in rank order); `contexts` are
// the replicas' CudaContexts (their streams carry the collectives).
std::vector<std::unique_ptr<Communicator>> make_nccl_comms(const std::vector<Device>& devices,
                                                           const std::vector<OpContext*>& contexts);

}  // namespace trainer
