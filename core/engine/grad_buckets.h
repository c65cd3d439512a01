// GradBuckets: the flat gradient buffer cut into buckets (in reverse layer order) that a
// communication thread all-reduces as soon as backward has finished them, while backward goes
// on; the optimizer then waits for one bucket at a time.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/dist/communicator.h"

namespace trainer {

class GradBuckets {
 public:
  // `grads`: the replica's flat trainable gradients; `cuts`: allowed bucket boundaries (the
  // parameter offsets), so no parameter is split; `bucket_floats`: the target bucket size.
  // `ctx` is bound on the communication thread (its OpenMP/CUDA device state). With one rank
  // there is nothing to reduce: no thread, and each bucket is done as soon as it is final.
  GradBuckets(Tensor grads, const std::vector<int64_t>& cuts, int64_t bucket_floats, Communicator& comm, OpContext& ctx);
  ~GradBuckets();  // stops the communication thread
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  struct Range {
    int64_t begin, end;
  };
  const std::vector<Range>& buckets() const { return buckets_; }  // ascending offsets

  void start_step();
  // From the backward hook: every gradient at offset >= frontier is final.
  void on_frontier(int64_t frontier);
  // Blocks until bucket i is reduced (rethrows the communication thread's error).
  void wait(size_t i);

  // Time accounting for the last step, in seconds: all-reduce work, and how long wait() blocked
  // after backward ended (the part not hidden behind backward).
  double reduce_seconds() const { return reduce_s_; }
  double exposed_seconds() const { return exposed_s_; }

 private:
  void loop();

  Tensor grads_;
  Communicator& comm_;
  OpContext& ctx_;
  std::vector<Range> buckets_;
  size_t next_ready_ = 0;  // buckets are handed over from the last (highest offsets) down
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  std::vector<bool> done_;
  bool stop_ = false;
  std::exception_ptr error_;
  double reduce_s_ = 0, exposed_s_ = 0;
  bool solo_ = false;  // one rank
  std::thread thread_;
};

}  // namespace trainer
