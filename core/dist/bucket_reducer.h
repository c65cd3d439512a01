// BucketReducer: a gradient all-reduce done by the replicas' own threads, bucket by bucket, a
// piece at a time between layers of backward, so that communication needs no core of its own.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

namespace trainer {

// A bucket: the half-open range [begin, end) of floats of a replica's flat gradient buffer.
struct BucketRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// One bucket's reduction in the last step as one rank saw it, in seconds from that rank's
// start_step (-1: did not happen). Pieces are the units of work any rank's thread may take.
struct BucketTrace {
  double ready = -1;  // this rank's gradients of the bucket were final (post)
  double start = -1;  // the first piece was taken, by any rank
  double end = -1;    // the last piece was summed: the bucket was reduced on every rank of the process
  int pieces = 0;     // pieces in the bucket
  int pieces_here = 0;  // ... taken by this rank's thread
  // Several processes: the exchange of the process's sum with the other processes (MPI), from
  // local rank 0's start to its end; exchange_all: the last process started it (until then the
  // exchange waited for a process whose backward was behind).
  double exchange_start = -1, exchange_end = -1, exchange_all = -1;
};

// The reduction protocol of one step, called by one rank's worker thread (never two threads):
//   start_step(); post(b) as backward finishes bucket b, from the last bucket down to 0;
//   progress() between layers; wait(b) before the optimizer reads bucket b.
// Every element's sum is taken in rank order 0..N-1 whoever computes it: deterministic, and the
// same bits on every rank. Errors and other ranks' aborts surface as CommError from wait().
class BucketReducer {
 public:
  using Clock = std::chrono::steady_clock;
  // Clock's now in ns since its epoch: the unit of the times ranks and processes exchange.
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  }
  virtual ~BucketReducer() = default;
  virtual void start_step() = 0;
  virtual void post(size_t bucket) = 0;
  // Sums whatever pieces every rank has posted and nobody has taken; never waits for another rank.
  virtual void progress() = 0;
  // Returns once `bucket` is reduced on this rank, summing pieces of any bucket meanwhile.
  virtual void wait(size_t bucket) = 0;

  // This step's accounting, in seconds: this rank's thread summing pieces; wait() blocked
  // because another rank had not yet posted the bucket (another replica of the process, or
  // another process, whose backward is behind: load imbalance, not communication); and the
  // per-bucket trace.
  virtual double work_seconds() const = 0;
  virtual double skew_seconds() const = 0;
  virtual const std::vector<BucketTrace>& trace() const = 0;
};

}  // namespace trainer
