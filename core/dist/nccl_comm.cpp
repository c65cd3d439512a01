// NcclComm: one GPU per rank, threads of one process or of several (mpirun); NCCL collectives on each replica's stream, abortable waits.
// Design, after the NCCL 2.28 user guide ("Using NCCL"):
// - Communicators are non-blocking (ncclConfig_t.blocking = 0), made by ncclGetUniqueId and
//   ncclCommInitRankConfig per device inside one group call (what ncclCommInitAll does, which only
//   makes blocking ones): no NCCL call can then block the host, e.g. in lazy connection setup with
//   a peer that died; calls return ncclInProgress and ncclCommGetAsyncError is polled until
//   ncclSuccess ("Nonblocking group operation", "Fault tolerance").
// - One thread per rank, each calling only its own communicator: collectives need no group calls
//   ("Group calls": only a thread driving several devices must group).
// - Waits poll cudaEventQuery, ncclCommGetAsyncError and the group's abort flag rather than block
//   in cudaStreamSynchronize ("Asynchronous errors and error handling"). A later version can hand
//   events to the caller instead of waiting here.
// - A communicator is touched by its own rank's thread only ("Thread safety"). abort() raises the
//   group's flag; a waiting rank sees it within ~1 ms, ncclCommAbort-s its own communicator (whose
//   kernels, spinning on peers, then quit) and throws CommError; later calls throw before touching
//   NCCL. The last owner of the group finalizes (or aborts) what is left, from one thread.
// - Across processes (make_nccl_process_comms): process 0's ncclGetUniqueId travels over MPI; each
//   process creates its devices' communicators (global rank = process * local devices + local rank)
//   in one group call. abort() reaches this process's ranks only: ranks of other processes stop when
//   the caller ends the run with mpi::abort (MPI_Abort).
// - Sums: NCCL's ring and tree all-reduces are deterministic for a fixed topology, rank count and
//   size, and all ranks get the same bits (NVIDIA/nccl#855); per element the order is the ring's or
//   tree's, not rank order. NVLS (in-switch reduction) differs from call to call (NVIDIA/nccl#1497),
//   so it is excluded unless the user set NCCL_ALGO.
#include "core/dist/nccl_comm.h"
#include "core/dist/nccl_group.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "core/ops/cuda/cuda_context.h"

namespace trainer {
namespace {

using nccl::Backoff;
using nccl::DeviceGuard;
using nccl::NcclGroup;
using nccl::nccl_message;
using nccl::nccl_type;
using nccl::where;

class NcclComm final : public Communicator {
 public:
  NcclComm(std::shared_ptr<NcclGroup> group, int rank, CudaContext& ctx)
      : group_(std::move(group)), rank_(rank), device_(group_->device(rank)), stream_(ctx.stream()) {
    DeviceGuard guard;
    try {
      CUDA_CHECK(cudaSetDevice(device_));
      CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
      int least = 0, greatest = 0;  // the started sums ahead of compute where both wait for SMs (as DDP's NCCL stream)
      CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      CUDA_CHECK(cudaStreamCreateWithPriority(&side_, cudaStreamNonBlocking, greatest));
      CUDA_CHECK(cudaMalloc(&dev_scratch_, kScratch));
      CUDA_CHECK(cudaMallocHost(&host_scratch_, kScratch));
      CUDA_CHECK(cudaMemset(dev_scratch_, 0, kScratch));
      scratch_bytes_ = kScratch;
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclComm() override { release(); }

  int rank() const override { return group_->first_rank() + rank_; }
  int size() const override { return group_->ranks(); }

  void all_reduce_sum(Tensor& buf) override {
    issue_all_reduce_sum(buf);
    if (buf.numel() > 0) wait_issued();
  }

  void broadcast(Tensor& buf, int root) override {
    issue_broadcast(buf, root);
    if (buf.bytes() > 0) wait_issued();
  }

  // Issued on the replica's stream, which a step's capture records: NCCL's collectives are
  // recorded as graph nodes (NCCL 2.9), and replaying the graph runs them.
  bool records() const override { return true; }

  void issue_all_reduce_sum(Tensor& buf) override {
    ncclComm_t c = begin();
    check_device(buf, "all_reduce_sum");
    if (buf.numel() == 0) return;
    ncclDataType_t t = nccl_type(buf.dtype());
    enqueued(c, ncclAllReduce(buf.data(), buf.data(), size_t(buf.numel()), t, ncclSum, c, stream_), "ncclAllReduce", __LINE__);
  }

  void issue_broadcast(Tensor& buf, int root) override {
    ncclComm_t c = begin();
    if (root < 0 || root >= size()) fail(fmt::format("{}: broadcast: root {} out of 0..{}", where(__FILE__, __LINE__), root, size() - 1));
    check_device(buf, "broadcast");
    if (buf.bytes() == 0) return;
    enqueued(c, ncclBroadcast(buf.data(), buf.data(), buf.bytes(), ncclUint8, root, c, stream_), "ncclBroadcast", __LINE__);
  }

  // In place (NCCL allows sendbuff == recvbuff + rank * count): this rank's part sent from where it lies.
  void issue_all_gather(Tensor& buf) override {
    ncclComm_t c = begin();
    check_device(buf, "all_gather");
    const size_t part = buf.bytes() / size_t(size());
    if (buf.dim(0) != buf.numel() || part * size_t(size()) != buf.bytes())
      fail(fmt::format("{}: all_gather: {} is not {} equal parts", where(__FILE__, __LINE__), buf.shape().str(), size()));
    if (part == 0) return;
    char* base = static_cast<char*>(buf.data());
    enqueued(c, ncclAllGather(base + size_t(rank()) * part, base, part, ncclUint8, c, stream_), "ncclAllGather", __LINE__);
  }

  // A bucket's sum beside backward: the side stream waits for the replica's stream's work so far
  // (the bucket's gradients), the sum runs there, and join_started() makes the replica's stream wait
  // for the side stream. A capture of the replica's stream records the fork, the collective and the
  // join as graph nodes and edges (CUDA's cross-stream capture: the side stream joins the capture
  // through the event). Only this communicator's collectives run on the side stream, in the order
  // started, and none is issued on the replica's stream until the join, so two of this
  // communicator's collectives never run at once; the caller keeps other communicators' collectives
  // out of that window (NCCL: communicators used concurrently must not be, "Using multiple NCCL
  // communicators concurrently").
  bool overlaps() const override { return true; }

  void start_all_reduce_sum(Tensor& buf) override {
    ncclComm_t c = begin();
    check_device(buf, "start_all_reduce_sum");
    if (buf.numel() == 0) return;
    comm_cuda(cudaEventRecord(fork_, stream_), "cudaEventRecord", __LINE__);
    comm_cuda(cudaStreamWaitEvent(side_, fork_, 0), "cudaStreamWaitEvent", __LINE__);
    started_ = true;
    ncclDataType_t t = nccl_type(buf.dtype());
    enqueued(c, ncclAllReduce(buf.data(), buf.data(), size_t(buf.numel()), t, ncclSum, c, side_), "ncclAllReduce", __LINE__);
  }

  void join_started() override {
    if (!started_) return;
    started_ = false;
    comm_cuda(cudaEventRecord(join_, side_), "cudaEventRecord", __LINE__);
    comm_cuda(cudaStreamWaitEvent(stream_, join_, 0), "cudaStreamWaitEvent", __LINE__);
  }

  void wait_issued() override { wait(begin()); }

  void check_abort() override {
    ncclComm_t c = begin();  // aborts this rank's communicator and throws once the group is aborted
    check_async(c);
  }

  // Every rank must pass the same number of values (NCCL cannot check it: a mismatch hangs until abort).
  void all_reduce_host(std::vector<double>& values) override {
    ncclComm_t c = begin();
    if (values.empty()) return;
    size_t bytes = values.size() * sizeof(double);
    reserve(bytes);
    std::memcpy(host_scratch_, values.data(), bytes);
    comm_cuda(cudaMemcpyAsync(dev_scratch_, host_scratch_, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync", __LINE__);
    enqueued(c, ncclAllReduce(dev_scratch_, dev_scratch_, values.size(), ncclFloat64, ncclSum, c, stream_), "ncclAllReduce", __LINE__);
    comm_cuda(cudaMemcpyAsync(host_scratch_, dev_scratch_, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync", __LINE__);
    wait(c);
    std::memcpy(values.data(), host_scratch_, bytes);
  }

  // An all-reduce completes on a rank only once every rank has contributed.
  void barrier() override {
    ncclComm_t c = begin();
    enqueued(c, ncclAllReduce(dev_scratch_, dev_scratch_, 1, ncclFloat32, ncclSum, c, stream_), "ncclAllReduce", __LINE__);
    wait(c);
  }

  void abort(const std::string& why) override { group_->abort(why); }

 private:
  static constexpr size_t kScratch = size_t(64) << 10;  // 8192 doubles: metrics and batch-norm statistics

  // Throws before touching NCCL once the group is aborted; makes this rank's device current.
  ncclComm_t begin() {
    if (group_->aborted()) aborted();
    ncclComm_t c = group_->comm(rank_);
    if (c == nullptr) aborted();
    comm_cuda(cudaSetDevice(device_), "cudaSetDevice", __LINE__);
    return c;
  }

  void check_device(const Tensor& buf, const char* op) {
    if (!(buf.device() == Device::cuda(device_)))
      fail(fmt::format("{}: {}: rank {} got a tensor on {}, expected cuda:{}", where(__FILE__, __LINE__), op, rank(),
                       buf.device().str(), device_));
  }

  // After an NCCL call: ncclInProgress (non-blocking communicator) means the operation is not yet on
  // the stream; nothing else may be issued to the stream before the state turns ncclSuccess.
  void enqueued(ncclComm_t c, ncclResult_t r, const char* call, int line) {
    if (r == ncclSuccess) return;
    if (r != ncclInProgress) fail_or_unrecordable(fmt::format("{}: {}: {}", where(__FILE__, line), call, nccl_message(r)));
    Backoff b;
    for (;;) {
      if (group_->aborted()) aborted();
      ncclResult_t s = ncclInProgress;
      ncclResult_t q = ncclCommGetAsyncError(c, &s);
      if (q != ncclSuccess) fail(fmt::format("{}: ncclCommGetAsyncError: {}", where(__FILE__, __LINE__), nccl_message(q)));
      if (s == ncclSuccess) return;
      if (s != ncclInProgress) fail(fmt::format("{}: {} (asynchronous): {}", where(__FILE__, line), call, nccl_message(s)));
      b.pause();
    }
  }

  // Waits until everything issued so far on the stream has finished, or the group is aborted, or
  // NCCL reports an asynchronous error (then this rank's communicator is aborted and CommError thrown).
  void wait(ncclComm_t c) {
    join_started();  // sums started beside the stream's work are waited for too
    comm_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord", __LINE__);
    count_host_wait();
    Backoff b;
    for (;;) {
      cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) comm_cuda(e, "cudaEventQuery", __LINE__);
      if (group_->aborted()) aborted();
      check_async(c);
      b.pause();
    }
  }

  // An error NCCL found on its own (a peer lost): this rank fails.
  void check_async(ncclComm_t c) {
    ncclResult_t s = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(c, &s);
    if (q != ncclSuccess) fail(fmt::format("{}: ncclCommGetAsyncError: {}", where(__FILE__, __LINE__), nccl_message(q)));
    if (s != ncclSuccess && s != ncclInProgress)
      fail(fmt::format("{}: NCCL asynchronous error on rank {} (cuda:{}): {}", where(__FILE__, __LINE__), rank(), device_,
                       nccl_message(s)));
  }

  void comm_cuda(cudaError_t e, const char* call, int line) {
    if (e != cudaSuccess) fail_or_unrecordable(fmt::format("{}: {}: {}", where(__FILE__, line), call, cudaGetErrorString(e)));
  }

  // While the replica's stream is being captured (or its capture was invalidated, which fails every
  // later call on it), an error means the step cannot be recorded, not that the group is broken: a
  // plain DeviceError, for Replica::run_program to run the step as launched, every rank's group
  // left running. Otherwise this rank fails the group.
  [[noreturn]] void fail_or_unrecordable(const std::string& msg) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone)
      throw DeviceError(msg + " (while recording the step)");
    fail(msg);
  }

  // Grows the scratch buffers (rare: beyond 8192 doubles). Old buffers are kept until destruction:
  // cudaFree/cudaFreeHost synchronise, which could wait on a peer's collective.
  void reserve(size_t bytes) {
    if (bytes <= scratch_bytes_) return;
    size_t n = std::max(bytes, 2 * scratch_bytes_);
    retired_.push_back({dev_scratch_, host_scratch_});
    dev_scratch_ = host_scratch_ = nullptr;
    scratch_bytes_ = 0;
    comm_cuda(cudaMalloc(&dev_scratch_, n), "cudaMalloc", __LINE__);
    comm_cuda(cudaMallocHost(&host_scratch_, n), "cudaMallocHost", __LINE__);
    scratch_bytes_ = n;
  }

  // This rank fails: every rank's collectives stop (abort), and this one reports why.
  [[noreturn]] void fail(const std::string& msg) {
    group_->abort(msg);
    group_->abort_comm(rank_);
    throw CommError(msg);
  }
  [[noreturn]] void aborted() {
    group_->abort_comm(rank_);
    throw CommError("collective aborted: " + group_->why());
  }

  void release() noexcept {
    DeviceGuard guard;
    if (cudaSetDevice(device_) != cudaSuccess) return;
    auto free_pair = [](void* d, void* h) {
      if (d != nullptr) (void)cudaFree(d);
      if (h != nullptr) (void)cudaFreeHost(h);
    };
    for (auto& [d, h] : retired_) free_pair(d, h);
    free_pair(dev_scratch_, host_scratch_);
    retired_.clear();
    dev_scratch_ = host_scratch_ = nullptr;
    for (cudaEvent_t* e : {&done_, &fork_, &join_}) {
      if (*e != nullptr) (void)cudaEventDestroy(*e);
      *e = nullptr;
    }
    if (side_ != nullptr) (void)cudaStreamDestroy(side_);
    side_ = nullptr;
  }

  std::shared_ptr<NcclGroup> group_;
  int rank_;
  int device_;
  cudaStream_t stream_;
  cudaEvent_t done_ = nullptr;
  cudaStream_t side_ = nullptr;  // start_all_reduce_sum's
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  bool started_ = false;  // sums started and not yet joined
  void* dev_scratch_ = nullptr;   // all_reduce_host / barrier operands on the device
  void* host_scratch_ = nullptr;  // pinned: both copies stay asynchronous, so waits stay abortable
  size_t scratch_bytes_ = 0;
  std::vector<std::pair<void*, void*>> retired_;
};

// The GPU ordinals of `devices` (one rank per GPU, distinct), checked against `contexts`.
std::vector<int> gpu_ordinals(const std::vector<Device>& devices, const std::vector<OpContext*>& contexts) {
  const int n = int(devices.size());
  if (n == 0 || contexts.size() != devices.size())
    throw DeviceError(fmt::format("NCCL communicators: {} devices but {} contexts", devices.size(), contexts.size()));
  int visible = 0;
  CUDA_CHECK(cudaGetDeviceCount(&visible));
  std::vector<int> devs;
  for (int r = 0; r < n; ++r) {
    const Device& d = devices[size_t(r)];
    if (d.is_cpu() || d.index < 0 || d.index >= visible)
      throw DeviceError(fmt::format("NCCL rank {}: {} is not one of the {} visible GPU(s)", r, d.str(), visible));
    if (contexts[size_t(r)] == nullptr || !(contexts[size_t(r)]->device() == d))
      throw DeviceError(fmt::format("NCCL rank {}: its context is not on {}", r, d.str()));
    devs.push_back(d.index);
  }
  if (std::set<int>(devs.begin(), devs.end()).size() != devs.size())
    throw DeviceError("NCCL needs distinct GPUs (one rank per GPU); replicas sharing a GPU use LocalComm");
  // Determinism (see the top of this file): keep NCCL off NVLS unless the user chose the algorithms —
  // both in-switch forms, NVLS and NVLSTree (multi-node NVLS; a name of its own in NCCL's list since
  // 2.18). NCCL reads NCCL_ALGO when a communicator is created.
  if (std::getenv("NCCL_ALGO") == nullptr) setenv("NCCL_ALGO", "^NVLS,NVLSTree", 0);
  return devs;
}

// Creates the communicators of `group` (this process's devices, global ranks first_rank..) from
// `id`, waits until they are ready and wraps them. On failure the group is aborted, which makes
// its destructor abort (rather than finalize) whatever was created.
std::vector<std::unique_ptr<Communicator>> connect(const std::shared_ptr<NcclGroup>& group, const ncclUniqueId& id,
                                                   const std::vector<OpContext*>& contexts) {
  DeviceGuard guard;
  const int n = group->local_size();
  try {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    std::vector<ncclConfig_t> configs(size_t(n), config);

    // One thread creating the communicators of several devices: a group call (NCCL "Group calls").
    std::string first_error;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < n && first_error.empty(); ++r) {
      int d = group->device(r), global = group->first_rank() + r;
      cudaError_t e = cudaSetDevice(d);
      ncclResult_t res = e == cudaSuccess ? ncclCommInitRankConfig(&group->comm(r), group->ranks(), id, global, &configs[size_t(r)])
                                          : ncclSuccess;
      if (e != cudaSuccess)
        first_error = fmt::format("{}: cudaSetDevice({}): {}", where(__FILE__, __LINE__), d, cudaGetErrorString(e));
      else if (res != ncclSuccess && res != ncclInProgress)
        first_error = fmt::format("{}: ncclCommInitRankConfig(rank {}, cuda:{}): {}", where(__FILE__, __LINE__), global, d, nccl_message(res));
    }
    ncclResult_t end = ncclGroupEnd();
    if (end != ncclSuccess && end != ncclInProgress) {
      // A failed group is undone by NCCL (as in ncclCommInitAll): leave its communicators alone.
      for (int r = 0; r < n; ++r) group->comm(r) = nullptr;
      if (first_error.empty())
        first_error = fmt::format("{}: ncclGroupEnd (communicator creation): {}", where(__FILE__, __LINE__), nccl_message(end));
    }
    if (!first_error.empty()) throw DeviceError(first_error);

    // Wait until every rank is ready (bounded: in one process none can be missing; across processes
    // a peer that never joins ends the wait here).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    for (int r = 0; r < n; ++r) {
      Backoff b;
      for (;;) {
        ncclResult_t s = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(group->comm(r), &s);
        std::string err;
        if (q != ncclSuccess) err = "ncclCommGetAsyncError: " + nccl_message(q);
        else if (s != ncclSuccess && s != ncclInProgress) err = "communicator creation: " + nccl_message(s);
        else if (s == ncclInProgress && std::chrono::steady_clock::now() > deadline) err = "communicator creation took over 300 s";
        if (!err.empty())
          throw DeviceError(fmt::format("{}: NCCL rank {} (cuda:{}): {}", where(__FILE__, __LINE__), group->first_rank() + r,
                                        group->device(r), err));
        if (s == ncclSuccess) break;
        b.pause();
      }
    }

    std::vector<std::unique_ptr<Communicator>> out;
    for (int r = 0; r < n; ++r) out.push_back(std::make_unique<NcclComm>(group, r, cuda_context(*contexts[size_t(r)])));
    return out;
  } catch (...) {
    group->abort("NCCL communicator creation failed");
    throw;
  }
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_comms(const std::vector<Device>& devices,
                                                           const std::vector<OpContext*>& contexts) {
  std::vector<int> devs = gpu_ordinals(devices, contexts);
  const int n = int(devs.size());
  auto group = std::make_shared<NcclGroup>(devs, 0, n);  // on failure its destructor aborts what was created
  ncclUniqueId id;
  try {
    NCCL_CHECK(ncclGetUniqueId(&id));
  } catch (...) {
    group->abort("make_nccl_comms failed");
    throw;
  }
  return connect(group, id, contexts);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_process_comms(const std::vector<Device>& devices,
                                                                   const std::vector<OpContext*>& contexts, int process_rank,
                                                                   int processes, const ShareFromProcess0& share) {
  if (processes < 1 || process_rank < 0 || process_rank >= processes)
    throw CommError(fmt::format("make_nccl_process_comms: process {} of {} is out of range", process_rank, processes));
  std::vector<int> devs = gpu_ordinals(devices, contexts);
  const int n = int(devs.size());
  auto group = std::make_shared<NcclGroup>(devs, process_rank * n, processes * n);
  // Process 0 makes the unique id and sends it to every process (over MPI); a failure there is sent
  // along, so that no process waits for peers that will never come.
  struct {
    int ok = 1;
    char why[256] = {};
    ncclUniqueId id;
  } msg;
  if (process_rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&msg.id);
    if (r != ncclSuccess) {
      msg.ok = 0;
      fmt::format_to_n(msg.why, sizeof msg.why - 1, "{}: ncclGetUniqueId: {}", where(__FILE__, __LINE__), nccl_message(r));
    }
  }
  try {
    share(&msg, sizeof msg);
  } catch (...) {
    group->abort("make_nccl_process_comms failed");
    throw;
  }
  if (!msg.ok) {
    group->abort("make_nccl_process_comms failed");
    throw DeviceError(process_rank == 0 ? std::string(msg.why) : "process 0 could not make the NCCL unique id: " + std::string(msg.why));
  }
  return connect(group, msg.id, contexts);
}

[[maybe_unused]] static const bool registered = (register_communicator_kind("nccl", make_nccl_comms),
                                                  register_process_communicator_kind("nccl", make_nccl_process_comms), true);

}  // namespace trainer
