// Replica threads and failure propagation.
#include "core/runtime/data_parallel/replica_group.h"

#include <fmt/format.h>

#include "core/dist/launch.h"
#include "core/dist/process_comm.h"
#include "core/dist/device_comms.h"
#include "core/runtime/rank_threads.h"

namespace trainer {

ReplicaGroup::ReplicaGroup(const TraineeSpec& t, const std::vector<Device>& devices, int threads) : devices_(devices) {
  const Launch& proc = this_process();
  const int first = proc.rank * int(devices.size());
  std::vector<OpContext*> contexts;
  for (size_t r = 0; r < devices.size(); ++r) {
    workers_.push_back(std::make_unique<ReplicaCopy>(t, first + int(r), devices[r], threads));
    contexts.push_back(&workers_.back()->replica().context());
  }
  // Two groups: gradients (communication threads) and control (worker threads), so the two
  // threads of a rank never interleave collectives on one communicator.
  if (proc.multi()) {
    grad_comms_ = make_process_communicators(devices, contexts, proc.rank, proc.size);
    ctl_comms_ = make_process_communicators(devices, contexts, proc.rank, proc.size);
  } else {
    grad_comms_ = make_communicators(devices, contexts);
    ctl_comms_ = make_communicators(devices, contexts);
  }
  host_comms_ = make_host_communicators(contexts, proc.rank, proc.size);
  for (size_t r = 0; r < devices.size(); ++r) workers_[r]->attach(*grad_comms_[r], *ctl_comms_[r], *host_comms_[r]);
}

// "CUDA graphs must be destroyed before NCCL communicators" (NCCL's CUDA graph notes): the
// communicators go before the replicas (a communicator's buffers come from its replica's context),
// so the recorded steps, whose graphs hold the communicators' collectives, go before both.
ReplicaGroup::~ReplicaGroup() {
  for (auto& w : workers_) w->replica().drop_recordings();
}

void ReplicaGroup::run(const std::function<void(ReplicaCopy&)>& fn) {
  run_rank_threads(
      size(),
      [&](int r) {
        workers_[size_t(r)]->bind_thread();
        fn(*workers_[size_t(r)]);
      },
      [&](int r) { return fmt::format("replica {}", workers_[size_t(r)]->rank()); },
      [&](const std::string& why) {
        grad_comms_[0]->abort(why);
        ctl_comms_[0]->abort(why);
        host_comms_[0]->abort(why);
      });
}

}  // namespace trainer
