// ReplicaGroup: this process's workers of a data-parallel run and their two communicator groups;
// runs a function on one thread per replica and, when any of them fails, aborts every collective
// so the others stop promptly, then rethrows the first failure (in a multi-process job it ends
// the whole job at once: other processes may be waiting in a collective for this one).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "core/runtime/data_parallel/replica_copy.h"

namespace trainer {

class ReplicaGroup {
 public:
  // `threads`: CPU compute threads per replica. In a job of several processes (this_process()),
  // every process runs one group of the same size; worker i has global rank process * size + i.
  ReplicaGroup(const TraineeSpec& t, const std::vector<Device>& devices, int threads);
  ~ReplicaGroup();  // the replicas' recorded programs first, then the communicators, then the replicas
  int size() const { return int(workers_.size()); }
  ReplicaCopy& worker(int r) { return *workers_[size_t(r)]; }
  const std::vector<Device>& devices() const { return devices_; }

  // fn(worker) on one thread per replica (each thread bound to its replica's device first).
  // Data and config errors keep their type (exit 3/2); any other failure of a replica becomes
  // a DeviceError naming the replica (exit 4).
  void run(const std::function<void(ReplicaCopy&)>& fn);

 private:
  std::vector<Device> devices_;
  std::vector<std::unique_ptr<ReplicaCopy>> workers_;
  // Gradients (communication threads), control (worker threads: buffers, statistics) and the
  // worker threads' host agreements on how each step runs (never through a device's stream).
  std::vector<std::unique_ptr<Communicator>> grad_comms_, ctl_comms_, host_comms_;
};

}  // namespace trainer
