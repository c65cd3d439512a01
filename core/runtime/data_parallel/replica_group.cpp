// Replica threads and failure propagation.
#include "core/runtime/data_parallel/replica_group.h"

#include <fmt/format.h>

#include <mutex>
#include <thread>

#include "core/data/dataset.h"
#include "core/dist/launch.h"
#include "core/dist/process_comm.h"
#include "core/dist/device_comms.h"
#include "core/runtime/failure.h"
#include "core/io/file.h"

namespace trainer {

ReplicaGroup::ReplicaGroup(const TraineeSpec& t, const std::vector<Device>& devices, int threads) : devices_(devices) {
  const Launch& proc = this_process();
  const int first = proc.rank * int(devices.size());
  std::vector<OpContext*> contexts;
  for (size_t r = 0; r < devices.size(); ++r) {
    workers_.push_back(std::make_unique<Worker>(t, first + int(r), devices[r], threads));
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
  for (size_t r = 0; r < devices.size(); ++r) workers_[r]->attach(*grad_comms_[r], *ctl_comms_[r]);
}

void ReplicaGroup::run(const std::function<void(Worker&)>& fn) {
  std::mutex mu;
  std::exception_ptr first;
  int first_rank = -1;
  auto body = [&](int r) {
    try {
      workers_[size_t(r)]->bind_thread();
      fn(*workers_[size_t(r)]);
    } catch (...) {
      std::string what = "unknown error";
      try {
        throw;
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        if (first) return;  // a consequence of the first failure (an aborted collective)
        first = std::current_exception();
        first_rank = r;
      }
      if (this_process().multi()) {  // other processes may wait in a collective for this one: end the job now
        Failure f = describe_failure(first);
        if (f.code == kExitInternal)  // as below: any other failure of a replica is a device error
          f = {kExitDevice, fmt::format("device error: replica {} failed: {}", workers_[size_t(r)]->rank(), what)};
        abort_job(f);
      }
      std::string why = fmt::format("replica {} failed: {}", r, what);
      grad_comms_[0]->abort(why);
      ctl_comms_[0]->abort(why);
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < size(); ++r) threads.emplace_back(body, r);
  body(0);  // rank 0 on the calling thread
  for (std::thread& t : threads) t.join();
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const DataError&) {
    throw;
  } catch (const FileError&) {
    throw;
  } catch (const cfg::ConfigError&) {
    throw;
  } catch (const DeviceError&) {
    throw;
  } catch (const std::exception& x) {
    if (size() == 1) throw;
    throw DeviceError(fmt::format("replica {} failed: {}", workers_[size_t(first_rank)]->rank(), x.what()));
  }
}

}  // namespace trainer
