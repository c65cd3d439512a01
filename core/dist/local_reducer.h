// LocalReducer: BucketReducer over the host memory of the replicas of one process (LocalComm),
// with an optional exchange between processes done by local rank 0 (ProcessComm over MPI).
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "core/dist/bucket_reducer.h"

namespace trainer {

// Between processes: local rank 0 sums its process's bucket with the other processes' (MPI).
// Buckets are started in the order they become ready (last to first), the same in every process.
class ProcessExchange {
 public:
  virtual ~ProcessExchange() = default;
  // `start_ns`: now, on this process's steady clock (BucketReducer::now_ns).
  virtual void start(size_t bucket, float* data, int64_t floats, int64_t start_ns) = 0;
  virtual bool test(size_t bucket) = 0;  // true once complete
  virtual void waiting() {}              // the worker has nothing left but to wait for exchanges
  // Once test(bucket) was true: when the last of the processes started this bucket's exchange,
  // on this process's steady clock (ns since its epoch). Before it, an exchange waits for a
  // process whose backward is behind: imbalance, not communication.
  virtual int64_t last_start_ns(size_t bucket) const = 0;
};

// What the ranks of one process share about one reducer: each rank's buffer, the step each rank
// has posted each bucket for, and per bucket counters of pieces taken and summed. Counters run on
// over steps (step s owns the values ((s-1)*P, s*P] of a bucket of P pieces), so nothing is reset
// between steps while a slower rank may still read them.
class ReduceBoard {
 public:
  ReduceBoard(int ranks, std::vector<BucketRange> buckets, bool exchanged);
  void abort(const std::string& why);
  bool exchanged() const { return exchanged_; }

 private:
  friend class LocalReducer;
  const int ranks_;
  const std::vector<BucketRange> buckets_;
  const bool exchanged_;  // buckets are done when local rank 0 has exchanged them, not when summed
  std::vector<int> pieces_;  // per bucket
  std::vector<float*> base_;  // per rank, set by each rank before its first post
  std::unique_ptr<std::atomic<uint64_t>[]> posted_;  // [bucket * ranks + rank]: the step posted
  std::unique_ptr<std::atomic<uint64_t>[]> taken_, summed_, exchanged_step_;  // per bucket
  std::unique_ptr<std::atomic<int64_t>[]> start_ns_, end_ns_;                 // per bucket, steady_clock
  // Several processes, per bucket, steady_clock: local rank 0 started the exchange; the last
  // process did (published with exchanged_step_).
  std::unique_ptr<std::atomic<int64_t>[]> exchange_ns_, all_started_ns_;
  std::atomic<uint32_t> events_{0};  // bumped on every post, summed piece, exchange and abort
  std::atomic<bool> aborted_{false};
  std::mutex why_mu_;
  std::string why_;  // the first abort's reason
};

class LocalReducer final : public BucketReducer {
 public:
  // `board` shared by the process's ranks (LocalGroup::board); `exchange` only on local rank 0 of
  // a run of several processes.
  LocalReducer(std::shared_ptr<ReduceBoard> board, int rank, float* grads, std::unique_ptr<ProcessExchange> exchange);
  void start_step() override;
  void post(size_t bucket) override;
  void progress() override;
  void wait(size_t bucket) override;
  double work_seconds() const override { return work_s_; }
  double skew_seconds() const override { return skew_s_; }
  const std::vector<BucketTrace>& trace() const override;

 private:
  bool take_piece();        // sums one piece of any ready bucket; false when there is none
  bool drive_exchanges();   // local rank 0: starts and tests exchanges; true if one moved
  bool done(size_t b) const;
  bool posted_by_all(size_t b) const;
  void sum_piece(size_t b, int piece);
  void notify();
  void check_abort() const;
  double process_skew(size_t b, int64_t entered) const;
  double seconds(int64_t ns) const;

  std::shared_ptr<ReduceBoard> b_;
  const int rank_;
  std::unique_ptr<ProcessExchange> exchange_;
  uint64_t step_ = 0;
  Clock::time_point t0_;
  size_t scan_ = 0;           // buckets at or above scan_ have no piece left to take this step
  size_t next_exchange_ = 0;  // local rank 0: buckets at or above it are exchanging or exchanged
  std::vector<bool> exchanging_;
  double work_s_ = 0, skew_s_ = 0;
  mutable std::vector<BucketTrace> trace_;
};

}  // namespace trainer
