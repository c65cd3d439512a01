// NcclGroup: what the NCCL communicators of one process's ranks share (their communicators, the
// abort flag and its reason, the last owner's finalize or abort), and the helpers of the NCCL code
// (its messages, file:line, a device guard, the polling pace, the data types). Internal to
// core/dist's nccl_*.cpp, which the CUDA build alone compiles.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/ops/cuda/cuda_context.h"

namespace trainer::nccl {

inline std::string nccl_message(ncclResult_t r) {
  std::string m = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);  // the argument is unused by NCCL
  if (last != nullptr && *last != '\0') m += std::string(" (") + last + ")";
  return m;
}

// Throw DeviceError("<file>:<line>: <call>: <NCCL message>") on failure.
#define NCCL_CHECK(x) do { ncclResult_t r_ = (x); \
  if (r_ != ncclSuccess) ::trainer::cuda_fail(#x, ::trainer::nccl::nccl_message(r_).c_str(), __FILE__, __LINE__); } while (0)

// "<file>:<line>" from the source tree's root, as cuda_fail writes it.
inline std::string where(const char* file, int line) {
  std::string f = file;
  size_t at = f.rfind("core/");
  return (at == std::string::npos ? f : f.substr(at)) + ":" + std::to_string(line);
}

// Restores the calling thread's current device.
struct DeviceGuard {
  int saved = -1;
  DeviceGuard() { if (cudaGetDevice(&saved) != cudaSuccess) saved = -1; }
  ~DeviceGuard() { if (saved >= 0) (void)cudaSetDevice(saved); }
};

// Polling pace: yield for the first millisecond (short collectives), then sleep 50 us, doubling to 1 ms.
class Backoff {
 public:
  void pause() {
    if (std::chrono::steady_clock::now() - start_ < std::chrono::milliseconds(1)) return std::this_thread::yield();
    std::this_thread::sleep_for(nap_);
    nap_ = std::min(nap_ * 2, std::chrono::microseconds(1000));
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::microseconds nap_{50};
};

inline ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::U8: return ncclUint8;
    default: return ncclFloat32;
  }
}

// State shared by the ranks of one group.
class NcclGroup {
 public:
  // This process's devices hold global ranks first_rank.. of `ranks` (several processes: mpirun).
  NcclGroup(std::vector<int> devices, int first_rank, int ranks)
      : devices_(std::move(devices)), comms_(devices_.size(), nullptr), first_rank_(first_rank), ranks_(ranks) {}
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  // Runs when the last rank's communicator is gone (or make_nccl_comms failed): no other thread uses
  // a communicator any more. Never throws.
  ~NcclGroup();

  int local_size() const { return int(devices_.size()); }
  int first_rank() const { return first_rank_; }
  int ranks() const { return ranks_; }
  int device(int r) const { return devices_[size_t(r)]; }
  ncclComm_t& comm(int r) { return comms_[size_t(r)]; }

  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load(std::memory_order_relaxed)) return;
    why_ = why;
    aborted_.store(true, std::memory_order_release);
  }
  std::string why() const {
    std::lock_guard<std::mutex> lock(mu_);
    return why_;
  }
  // Called by rank r's own thread only: aborts its communicator, whose kernels then stop waiting for
  // peers. NCCL frees a process's communicators only when the last one of the clique is destroyed
  // or aborted (commReclaim), so peers still running are unaffected. Never throws.
  void abort_comm(int r) noexcept;

 private:
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;  // null once aborted by its rank
  int first_rank_, ranks_;
  mutable std::mutex mu_;
  std::atomic<bool> aborted_{false};
  std::string why_;
};

}  // namespace trainer::nccl
