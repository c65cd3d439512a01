// GradBuckets: the flat gradient buffer cut into buckets (in reverse layer order) that are
// all-reduced as soon as backward has finished them, while backward goes on; the optimizer then
// waits for one bucket at a time. Host memory is summed by the replicas' own threads between
// layers (a BucketReducer: no thread competes with compute for a core); device memory by a
// communication thread driving the communicator's own stream (NCCL, one GPU listed twice).
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/dist/communicator.h"

namespace trainer {

// The buckets for a buffer of `floats` gradients whose parameters start at `cuts` (a bucket never
// splits a parameter), from the end (backward's first) down to offset 0. `bucket_floats` > 0:
// every bucket at least that large. 0 (train.bucket_mb: auto): sized for the reduction path, as
// measured (README, "Data parallelism"): `cooperative` host reductions take buckets of 1/16 of
// the model clamped to [64 Ki, 256 Ki] floats (summing starts early, little is left for the end);
// a communication thread takes PyTorch DDP's 1 MiB first bucket, then 25 MiB ones (few launches).
std::vector<BucketRange> plan_buckets(int64_t floats, const std::vector<int64_t>& cuts, int64_t bucket_floats, bool cooperative);

class GradBuckets {
 public:
  // `grads`: the replica's flat trainable gradients; `cuts`: allowed bucket boundaries (the
  // parameter offsets); `bucket_floats`: as plan_buckets. `ctx` is bound on the communication
  // thread, if there is one (its OpenMP/CUDA device state). With one rank there is nothing to
  // reduce: each bucket is done as soon as it is final.
  GradBuckets(Tensor grads, const std::vector<int64_t>& cuts, int64_t bucket_floats, Communicator& comm, OpContext& ctx);
  ~GradBuckets();  // stops the communication thread
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  const std::vector<BucketRange>& buckets() const { return buckets_; }  // ascending offsets
  // "worker threads" (a BucketReducer), "communication thread", or "none" (one rank).
  const char* reduced_by() const;
  bool threaded() const { return thread_.joinable(); }  // a communication thread reduces

  void start_step();
  // From the backward hook: every gradient at offset >= frontier is final.
  void on_frontier(int64_t frontier);
  // Between layers of backward: the worker thread sums what the ranks have posted (a no-op on
  // the communication-thread path).
  void progress();
  // Blocks until bucket i is reduced (rethrows the reduction's error).
  void wait(size_t i);

  // Time accounting for the last step, in seconds: all-reduce time (this rank's summing and its
  // exchanges with other processes from start to end, or the communication thread's collectives);
  // how long wait() took after backward ended, less skew: the part not hidden behind backward,
  // the summing done there included; skew: wait() blocked because another rank's backward had not
  // reached the bucket yet (a replica of this process or another process behind, known to the
  // worker-thread path only).
  double reduce_seconds() const;
  double exposed_seconds() const { return std::max(0.0, exposed_s_ - skew_seconds()); }
  double skew_seconds() const { return reducer_ ? reducer_->skew_seconds() : 0.0; }
  // The last step's per-bucket timeline (seconds from start_step); valid once every wait returned.
  std::vector<BucketTrace> trace() const;

 private:
  using Clock = std::chrono::steady_clock;
  void loop();

  Tensor grads_;
  Communicator& comm_;
  OpContext& ctx_;
  std::vector<BucketRange> buckets_;
  size_t next_ready_ = 0;  // buckets are handed over from the last (highest offsets) down
  std::unique_ptr<BucketReducer> reducer_;
  Clock::time_point t0_;
  double exposed_s_ = 0;

  // The communication-thread path.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  std::vector<bool> done_;
  std::vector<BucketTrace> trace_;  // ready, start, end (under mu_)
  bool stop_ = false;
  std::exception_ptr error_;
  double reduce_s_ = 0;
  bool solo_ = false;  // one rank
  std::thread thread_;
};

}  // namespace trainer
