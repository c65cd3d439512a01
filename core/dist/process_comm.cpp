// ProcessComm (LocalComm within a process, MPI between processes from local rank 0) and make_process_communicators.
#include "core/dist/process_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>

#include "core/dist/local_comm.h"
#include "core/dist/mpi_world.h"
#include "core/dist/device_comms.h"
#ifdef TRAINER_HAVE_MPI
#include <mpi.h>
#endif

namespace trainer {
namespace {

enum class Kind { Cpu, OneGpu, DistinctGpus };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Cpu: return "CPU replicas";
    case Kind::OneGpu: return "replicas sharing one GPU";
    default: return "replicas on distinct GPUs";
  }
}

Kind classify(const std::vector<Device>& devices) {
  bool cpu = std::all_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cpu(); });
  if (cpu) return Kind::Cpu;
  bool gpu = std::none_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cpu(); });
  std::set<int> ordinals;
  for (const Device& d : devices) ordinals.insert(d.index);
  if (gpu && ordinals.size() == devices.size()) return Kind::DistinctGpus;
  if (gpu && ordinals.size() == 1) return Kind::OneGpu;
  std::string list;
  for (const Device& d : devices) {
    if (!list.empty()) list += ',';
    list += d.str();
  }
  throw DeviceError(fmt::format("data-parallel replicas on {}: all CPU, all on distinct GPUs or all on one GPU, not a mix", list));
}

#ifdef TRAINER_HAVE_MPI

// This group's own duplicate of MPI_COMM_WORLD, used by local rank 0's thread only.
class MpiGroup {
 public:
  MpiGroup() {
    int e = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    if (e != MPI_SUCCESS) throw CommError(mpi::error_message("MPI_Comm_dup", e));
  }
  ~MpiGroup() {
    if (comm_ != MPI_COMM_NULL && mpi::initialized()) (void)MPI_Comm_free(&comm_);
  }
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Local rank 0's half of a gradient bucket's reduction: the process's sum with the other
// processes', by non-blocking MPI_Iallreduce (sums as all_reduce_sum). Open MPI advances a
// collective only inside MPI calls, and the worker thread reaches one only between layers (tens of
// milliseconds apart in a large convolution), so a progress thread tests the exchanges in flight
// every kPoll and sleeps in between: well under a percent of a core while backward runs, never a
// core of its own, blocked on a condition variable when nothing is in flight. Once the worker
// waits for an exchange (backward is over, its core is free) the thread tests without sleeping.
// With each bucket goes the time its exchange was started, on process 0's clock (a maximum, so
// that every process learns when the last one started: last_start_ns).
class MpiExchange final : public ProcessExchange {
 public:
  MpiExchange(std::shared_ptr<MpiGroup> world, size_t buckets)
      : world_(std::move(world)), requests_(buckets), started_(buckets, 0),
        done_(std::make_unique<std::atomic<bool>[]>(buckets)) {
    for (auto& r : requests_) r.reserve(2);
    for (size_t b = 0; b < buckets; ++b) done_[b].store(false);
    offset_ns_ = clock_offset_ns(world_->comm());
    thread_ = std::thread([this] { loop(); });
  }
  ~MpiExchange() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start(size_t bucket, float* data, int64_t floats, int64_t start_ns) override {
    done_[bucket].store(false, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
    jobs_.push_back({bucket, data, floats, start_ns});
    cv_.notify_all();
  }
  bool test(size_t bucket) override {
    if (done_[bucket].load(std::memory_order_acquire)) return true;
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
    return false;
  }
  void waiting() override { hurry_.store(true, std::memory_order_relaxed); }
  int64_t last_start_ns(size_t bucket) const override { return started_[bucket] - offset_ns_; }

 private:
  struct Job {
    size_t bucket;
    float* data;
    int64_t floats;
    int64_t start_ns;  // this process's steady clock
  };
  // Process 0's steady clock less this process's (Cristian's algorithm: of 8 round trips to
  // process 0, the shortest, whose midpoint is taken as the moment process 0 read its clock).
  // Collective; microseconds of error on one machine, the round trip's half at most across them.
  static int64_t clock_offset_ns(MPI_Comm comm) {
    constexpr int kRounds = 8, kTag = 7;
    int rank = 0, size = 1;
    check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    int64_t t = 0, offset = 0, best = INT64_MAX;
    for (int peer = 1; peer < size; ++peer) {
      if (rank != 0 && rank != peer) continue;
      for (int k = 0; k < kRounds; ++k) {
        if (rank == 0) {
          check(MPI_Recv(&t, 1, MPI_INT64_T, peer, kTag, comm, MPI_STATUS_IGNORE), "MPI_Recv");
          t = BucketReducer::now_ns();
          check(MPI_Send(&t, 1, MPI_INT64_T, peer, kTag, comm), "MPI_Send");
          continue;
        }
        const int64_t sent = BucketReducer::now_ns();
        check(MPI_Send(&t, 1, MPI_INT64_T, 0, kTag, comm), "MPI_Send");
        check(MPI_Recv(&t, 1, MPI_INT64_T, 0, kTag, comm, MPI_STATUS_IGNORE), "MPI_Recv");
        const int64_t back = BucketReducer::now_ns();
        if (back - sent < best) {
          best = back - sent;
          offset = t - (sent + (back - sent) / 2);
        }
      }
    }
    return offset;
  }
  void loop() {
    std::vector<size_t> flight;
    for (;;) {
      if (flight.empty()) hurry_.store(false, std::memory_order_relaxed);
      std::vector<Job> jobs;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (flight.empty()) cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (stop_) return;
        jobs.swap(jobs_);
      }
      try {
        for (const Job& j : jobs) {  // in the order the worker started them: the same in every process
          auto& r = requests_[j.bucket];
          r.clear();
          for (int64_t at = 0; at < j.floats;) {  // MPI counts are ints
            const int n = int(std::min<int64_t>(j.floats - at, INT_MAX));
            MPI_Request q = MPI_REQUEST_NULL;
            check(MPI_Iallreduce(MPI_IN_PLACE, j.data + at, n, MPI_FLOAT, MPI_SUM, world_->comm(), &q), "MPI_Iallreduce");
            r.push_back(q);
            at += n;
          }
          started_[j.bucket] = j.start_ns + offset_ns_;
          MPI_Request q = MPI_REQUEST_NULL;
          check(MPI_Iallreduce(MPI_IN_PLACE, &started_[j.bucket], 1, MPI_INT64_T, MPI_MAX, world_->comm(), &q), "MPI_Iallreduce");
          r.push_back(q);
          flight.push_back(j.bucket);
        }
        for (size_t i = 0; i < flight.size();) {
          auto& r = requests_[flight[i]];
          int flag = 0;
          check(MPI_Testall(int(r.size()), r.data(), &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
          if (!flag) {
            ++i;
            continue;
          }
          done_[flight[i]].store(true, std::memory_order_release);
          flight.erase(flight.begin() + std::ptrdiff_t(i));
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        return;
      }
      if (flight.empty()) continue;
      if (hurry_.load(std::memory_order_relaxed)) std::this_thread::yield();
      else std::this_thread::sleep_for(kPoll);
    }
  }
  static void check(int code, const char* call) {
    if (code != MPI_SUCCESS) throw CommError(mpi::error_message(call, code));
  }
  std::shared_ptr<MpiGroup> world_;
  std::vector<std::vector<MPI_Request>> requests_;
  std::vector<int64_t> started_;  // per bucket, process 0's clock: the latest process's start once done
  int64_t offset_ns_ = 0;
  static constexpr std::chrono::microseconds kPoll{500};
  std::unique_ptr<std::atomic<bool>[]> done_;
  std::atomic<bool> hurry_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Job> jobs_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

class ProcessComm final : public Communicator {
 public:
  ProcessComm(std::shared_ptr<LocalGroup> local, std::shared_ptr<MpiGroup> world, int local_rank, int process_rank,
              int processes, OpContext& ctx)
      : local_(std::move(local), local_rank, ctx), world_(std::move(world)), local_rank_(local_rank),
        process_rank_(process_rank), processes_(processes), ctx_(ctx) {}

  int rank() const override { return process_rank_ * local_.size() + local_rank_; }
  int size() const override { return processes_ * local_.size(); }

  // Local sum (rank order), then the processes' sums by MPI_Allreduce: Open MPI's algorithms
  // (recursive doubling, ring, Rabenseifner) combine the same two partial sums on both sides of
  // each exchange, and float + is commutative, so every process gets the same bits; the order is
  // fixed for a fixed process count and size (deterministic).
  void all_reduce_sum(Tensor& buf) override {
    if (buf.dtype() != DType::F32)
      fail(fmt::format("all_reduce_sum: rank {} got a {} tensor, only f32 is summed across processes", rank(), dtype_name(buf.dtype())));
    local_.all_reduce_sum(buf);
    if (local_rank_ == 0 && buf.numel() > 0) {
      float* host = to_host(buf, true);
      for (int64_t at = 0; at < buf.numel();) {  // MPI counts are ints
        int n = int(std::min<int64_t>(buf.numel() - at, INT_MAX));
        check(MPI_Allreduce(MPI_IN_PLACE, host + at, n, MPI_FLOAT, MPI_SUM, world_->comm()), "MPI_Allreduce");
        at += n;
      }
      from_host(buf, host);
    }
    local_.broadcast(buf, 0);
  }

  // Within root's process from root's local rank, to the other processes' local rank 0 (MPI_Bcast),
  // then within each of those from local rank 0.
  void broadcast(Tensor& buf, int root) override {
    if (root < 0 || root >= size()) fail(fmt::format("broadcast: root {} out of 0..{}", root, size() - 1));
    const int root_process = root / local_.size();
    const bool sender = process_rank_ == root_process;
    if (sender) local_.broadcast(buf, root % local_.size());
    if (local_rank_ == 0 && buf.bytes() > 0) {
      auto* host = reinterpret_cast<char*>(to_host(buf, sender));
      for (size_t at = 0; at < buf.bytes();) {
        int n = int(std::min(buf.bytes() - at, size_t(INT_MAX)));
        check(MPI_Bcast(host + at, n, MPI_BYTE, root_process, world_->comm()), "MPI_Bcast");
        at += size_t(n);
      }
      if (!sender) from_host(buf, reinterpret_cast<float*>(host));
    }
    if (!sender) local_.broadcast(buf, 0);
  }

  // Every rank passes the same number of values (MPI cannot tell a mismatch between processes).
  void all_reduce_host(std::vector<double>& values) override {
    local_.all_reduce_host(values);
    if (local_rank_ == 0 && !values.empty()) {
      if (values.size() > size_t(INT_MAX)) fail(fmt::format("all_reduce_host: {} values are too many", values.size()));
      check(MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_DOUBLE, MPI_SUM, world_->comm()),
            "MPI_Allreduce");
    }
    // Share local rank 0's result: the others add zeros (x + 0 == x).
    if (local_.size() > 1) {
      if (local_rank_ != 0) std::fill(values.begin(), values.end(), 0.0);
      local_.all_reduce_host(values);
    }
  }

  void barrier() override {
    local_.barrier();
    if (local_rank_ == 0) check(MPI_Barrier(world_->comm()), "MPI_Barrier");
    local_.barrier();
  }

  void abort(const std::string& why) override { local_.abort(why); }

  // CPU replicas: the process's threads sum each bucket, then local rank 0 exchanges it with the
  // other processes (MpiExchange). GPU memory: null (the communication thread calls all_reduce_sum).
  std::unique_ptr<BucketReducer> make_bucket_reducer(Tensor& grads, const std::vector<BucketRange>& buckets) override {
    if (!grads.device().is_cpu()) return nullptr;
    std::unique_ptr<ProcessExchange> exchange;
    // Its own duplicate of MPI_COMM_WORLD (collective: every process's local rank 0 makes its
    // reducers in the same order), so its collectives never interleave with this communicator's.
    if (local_rank_ == 0) exchange = std::make_unique<MpiExchange>(std::make_shared<MpiGroup>(), buckets.size());
    return local_.make_bucket_reducer(grads, buckets, true, std::move(exchange));
  }

 private:
  // `buf` as host memory: itself on CPU, else a copy (made only when `fill`: a receiver needs none).
  float* to_host(Tensor& buf, bool fill) {
    if (buf.device().is_cpu()) return static_cast<float*>(buf.data());
    host_.resize((buf.bytes() + sizeof(float) - 1) / sizeof(float));
    if (fill) ctx_.copy_to_host(host_.data(), buf.data(), buf.bytes());  // synchronous
    return host_.data();
  }
  void from_host(Tensor& buf, const float* host) {
    if (buf.device().is_cpu()) return;
    ctx_.copy_from_host(buf.data(), host, buf.bytes());
    ctx_.synchronize();
  }

  void check(int code, const char* call) {
    if (code != MPI_SUCCESS) fail(mpi::error_message(call, code));
  }
  // This rank fails: the ranks of its process stop waiting (abort), and this one reports why.
  [[noreturn]] void fail(const std::string& msg) {
    std::string m = fmt::format("rank {} (process {}): {}", rank(), process_rank_, msg);
    local_.abort(m);
    throw CommError(m);
  }

  LocalComm local_;
  std::shared_ptr<MpiGroup> world_;
  int local_rank_, process_rank_, processes_;
  OpContext& ctx_;
  std::vector<float> host_;  // staging for GPU memory
};

#endif  // TRAINER_HAVE_MPI

// What a run of one process uses.
std::vector<std::unique_ptr<Communicator>> single_process(Kind kind, const std::vector<Device>& devices,
                                                          const std::vector<OpContext*>& contexts) {
  if (kind != Kind::DistinctGpus || devices.size() == 1) return make_local_comms(contexts);
  return make_communicators(devices, contexts);
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_process_communicators(const std::vector<Device>& devices,
                                                                      const std::vector<OpContext*>& contexts,
                                                                      int process_rank, int processes) {
  const int n = int(devices.size());
  if (n == 0 || contexts.size() != devices.size())
    throw DeviceError(fmt::format("make_process_communicators: {} devices but {} contexts", devices.size(), contexts.size()));
  for (int r = 0; r < n; ++r)
    if (contexts[size_t(r)] == nullptr || !(contexts[size_t(r)]->device() == devices[size_t(r)]))
      throw DeviceError(fmt::format("make_process_communicators: local rank {}: its context is not on {}", r, devices[size_t(r)].str()));
  if (processes < 1 || process_rank < 0 || process_rank >= processes)
    throw CommError(fmt::format("make_process_communicators: process {} of {} is out of range", process_rank, processes));
  Kind kind = classify(devices);
  if (processes == 1) return single_process(kind, devices, contexts);

  if (!mpi::built())
    throw CommError(fmt::format("a run of {} processes needs MPI, which this build lacks (configure with TRAINER_MPI=ON)", processes));
  if (!mpi::initialized() || mpi::size() != processes || mpi::rank() != process_rank)
    throw CommError(fmt::format("make_process_communicators: process {} of {}, but MPI says process {} of {}{}", process_rank,
                                processes, mpi::rank(), mpi::size(), mpi::initialized() ? "" : " (MPI is not initialized)"));
  // Every process must take the same path with as many ranks, or the collectives below would hang.
  std::string mine = fmt::format("{} {}", n, kind_name(kind));
  std::vector<std::string> all = mpi::allgather(mine);
  for (int p = 0; p < processes; ++p)
    if (all[size_t(p)] != all[0])
      throw CommError(fmt::format("process 0 has {} but process {} has {}: every process of a run needs as many replicas, "
                                  "of one kind", all[0], p, all[size_t(p)]));

  if (kind == Kind::DistinctGpus) {
    ProcessCommunicatorKind nccl = process_communicator_kind("nccl");
    if (!nccl) throw DeviceError("GPUs across processes need NCCL, which this build lacks");
    return nccl(devices, contexts, process_rank, processes, [](void* data, size_t bytes) { mpi::broadcast_bytes(data, bytes, 0); });
  }
#ifdef TRAINER_HAVE_MPI
  auto local = std::make_shared<LocalGroup>(n);
  auto world = std::make_shared<MpiGroup>();  // MPI_Comm_dup: collective, here on the calling thread
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_unique<ProcessComm>(local, world, r, process_rank, processes, *contexts[size_t(r)]));
  return out;
#else
  throw CommError("unreachable: MPI is not built");
#endif
}

std::vector<std::unique_ptr<Communicator>> make_host_communicators(const std::vector<OpContext*>& contexts,
                                                                   int process_rank, int processes) {
  if (processes == 1) return make_local_comms(contexts);
#ifdef TRAINER_HAVE_MPI
  if (!mpi::initialized() || mpi::size() != processes || mpi::rank() != process_rank)
    throw CommError(fmt::format("make_host_communicators: process {} of {}, but MPI says otherwise", process_rank, processes));
  const int n = int(contexts.size());
  auto local = std::make_shared<LocalGroup>(n);
  auto world = std::make_shared<MpiGroup>();
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_unique<ProcessComm>(local, world, r, process_rank, processes, *contexts[size_t(r)]));
  return out;
#else
  throw CommError(fmt::format("a run of {} processes needs MPI, which this build lacks (configure with TRAINER_MPI=ON)", processes));
#endif
}

}  // namespace trainer
