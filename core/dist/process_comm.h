// make_process_communicators: data-parallel ranks across processes (mpirun): LocalComm within one, MPI or NCCL between.
#pragma once
#include <memory>
#include <vector>

#include "core/dist/communicator.h"

namespace trainer {

// One communicator per local replica (`devices[i]` on `contexts[i]`, in local rank order) for a
// run of `processes` processes with devices.size() replicas each (the same count everywhere);
// global rank = process_rank * devices.size() + local rank, size() = processes * devices.size().
//
// - CPU replicas, or one GPU listed several times: a hierarchical communicator. Each call makes a
//   group of its own: a LocalGroup for this process's threads and its own duplicate of
//   MPI_COMM_WORLD, so two groups (a replica's gradient and control groups) may be inside
//   collectives at once from different threads. A collective first meets the process's threads
//   (LocalComm), then local rank 0 alone talks MPI (over a host copy for GPU memory), then the
//   result is shared locally; every global rank gets the same bits.
// - Distinct GPUs, several processes: NCCL across processes (make_nccl_process_comms).
// - One process: what a single-process run uses (LocalComm, or NCCL for distinct GPUs).
//
// Collective over MPI_COMM_WORLD when processes > 1 (needs mpi::init; process_rank and processes
// must be MPI's): every process calls it from one thread, in the same order, while no other thread
// uses MPI_COMM_WORLD. Processes whose device count or kind differ get a CommError naming them.
// abort() of a communicator wakes the ranks of its own process only; a run whose rank failed ends
// the other processes with mpi::abort.
std::vector<std::unique_ptr<Communicator>> make_process_communicators(const std::vector<Device>& devices,
                                                                      const std::vector<OpContext*>& contexts,
                                                                      int process_rank, int processes);

// Communicators for the replicas' host agreements only (all_reduce_host, barrier): the process's
// threads meet on the host (LocalComm) and, with several processes, local rank 0 over MPI — never
// a device's stream, which NCCL's host reductions queue behind the step's work (a wait for the
// device). A collective over MPI_COMM_WORLD as above when processes > 1.
std::vector<std::unique_ptr<Communicator>> make_host_communicators(const std::vector<OpContext*>& contexts,
                                                                   int process_rank, int processes);

}  // namespace trainer
