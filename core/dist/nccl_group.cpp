// NcclGroup's end: the last owner finalizes every communicator of the process together, or aborts
// them after a failure; a rank's own abort.
#include "core/dist/nccl_group.h"

namespace trainer::nccl {

NcclGroup::~NcclGroup() {
  DeviceGuard guard;
  bool clean = !aborted() && std::all_of(comms_.begin(), comms_.end(), [](ncclComm_t c) { return c != nullptr; });
  if (clean) {
    // Flush and release network/proxy resources of all ranks together (one thread, several
    // devices: a group call), wait (bounded) for every communicator to quiesce, then free.
    bool ok = ncclGroupStart() == ncclSuccess;
    for (size_t r = 0; ok && r < comms_.size(); ++r) {
      ok = cudaSetDevice(devices_[r]) == cudaSuccess;
      ncclResult_t f = ok ? ncclCommFinalize(comms_[r]) : ncclInternalError;
      ok = ok && (f == ncclSuccess || f == ncclInProgress);
    }
    ncclResult_t e = ncclGroupEnd();
    ok = ok && (e == ncclSuccess || e == ncclInProgress);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (size_t r = 0; ok && r < comms_.size(); ++r) {
      Backoff b;
      for (;;) {
        ncclResult_t s = ncclInProgress;
        if (ncclCommGetAsyncError(comms_[r], &s) != ncclSuccess || (s != ncclSuccess && s != ncclInProgress)) ok = false;
        else if (s == ncclInProgress && std::chrono::steady_clock::now() > deadline) ok = false;
        if (!ok || s == ncclSuccess) break;
        b.pause();
      }
    }
    clean = ok;
  }
  for (size_t r = 0; r < comms_.size(); ++r) {
    if (comms_[r] == nullptr) continue;
    (void)cudaSetDevice(devices_[r]);
    if (clean) (void)ncclCommDestroy(comms_[r]);
    else (void)ncclCommAbort(comms_[r]);
    comms_[r] = nullptr;
  }
}

void NcclGroup::abort_comm(int r) noexcept {
  ncclComm_t c = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(c, comms_[size_t(r)]);
  }
  if (c == nullptr) return;
  DeviceGuard guard;
  (void)cudaSetDevice(devices_[size_t(r)]);
  (void)ncclCommAbort(c);
}

}  // namespace trainer::nccl
