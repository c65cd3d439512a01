// LocalComm: the replicas of one process as threads, over host memory (CPU replicas) or the
// memory of one GPU listed twice; ranks meet at a rendezvous per collective (inside a recorded
// step too: between its pieces).
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>

#include "core/dist/communicator.h"
#include "core/dist/local_reducer.h"
#include "core/ops/elementwise.h"

namespace trainer {

class ReduceBoard;

// State shared by the ranks of one LocalComm group.
class LocalGroup {
 public:
  explicit LocalGroup(int size);
  int size() const { return size_; }

 private:
  friend class LocalComm;
  OpContext* context(int rank) const { return contexts_[size_t(rank)]; }
  bool one_device() const;  // every rank's context on the same device
  // Each rank's inbox (LocalComm's issued collectives), registered as it is made or grown.
  void set_inbox(int rank, void* p);
  std::vector<void*> inboxes() const;
  // Blocks until all ranks have arrived at collective number `seq` (or throws on abort).
  void arrive(int rank, uint64_t seq, void* ptr);
  void* pointer(int rank) const { return ptrs_[size_t(rank)]; }
  void depart(int rank, uint64_t seq);
  void abort(const std::string& why);
  void check() const;  // throws CommError when aborted
  // The board of this group's index-th bucket reducer, made by the first rank to ask; a rank whose
  // buckets differ from the first's gets a CommError.
  std::shared_ptr<ReduceBoard> board(size_t index, const std::vector<BucketRange>& buckets, bool exchanged);

  int size_;
  std::vector<OpContext*> contexts_;  // each rank's, set as its LocalComm is made
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<void*> ptrs_;
  std::vector<void*> inboxes_;
  std::vector<uint64_t> arrived_, departed_;
  std::vector<std::vector<double>*> host_;
  std::vector<std::shared_ptr<ReduceBoard>> boards_;
  std::vector<std::vector<BucketRange>> board_buckets_;
  bool aborted_ = false;
  std::string why_;
};

class LocalComm final : public Communicator {
 public:
  // `ctx` is this rank's context: reductions of this rank's slice run on it.
  LocalComm(std::shared_ptr<LocalGroup> group, int rank, OpContext& ctx);
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  void all_reduce_sum(Tensor& buf) override;
  void broadcast(Tensor& buf, int root) override;
  void all_reduce_host(std::vector<double>& values) override;
  void barrier() override;
  void abort(const std::string& why) override { group_->abort(why); }
  // Collectives inside a recorded step: where every rank's context records (one GPU listed N
  // times, `--gpus 0,0`), the ranks meet between the recorded pieces (OpContext::host_step: a
  // rendezvous on the host, each rank's queue then waiting for the others' queued work) and the
  // copies and sums are recorded kernels. As called elsewhere (the CPU, in tests), the same
  // collectives. Either way the host never waits for a device: the results are there for the
  // rank's later queued work. Each rank copies its part into an inbox of its own, the ranks meet,
  // each reads the others' inboxes (the all-reduce sums them in rank order, as all_reduce_sum: the
  // same bits), and the ranks meet again before any inbox is written anew. A capture meets nobody
  // (its rendezvous wait for the replays) and reads the inboxes the ranks registered when the step
  // last ran as called, so that a rank whose recording fails leaves no other waiting; a replay
  // checks that they are still the ones recorded.
  bool records() const override;
  void issue_all_reduce_sum(Tensor& buf) override;
  void issue_broadcast(Tensor& buf, int root) override;
  void issue_all_gather(Tensor& buf) override;
  // CPU memory only (null for a GPU's): the ranks' threads sum the buckets (LocalReducer).
  std::unique_ptr<BucketReducer> make_bucket_reducer(Tensor& grads, const std::vector<BucketRange>& buckets) override;
  // The same for one process of several (ProcessComm, `exchanged`): a bucket is reduced once local
  // rank 0, which alone holds an `exchange`, has summed it with the other processes'.
  std::unique_ptr<BucketReducer> make_bucket_reducer(Tensor& grads, const std::vector<BucketRange>& buckets, bool exchanged,
                                                     std::unique_ptr<ProcessExchange> exchange);

 private:
  // The issued collectives' rendezvous, in a host step: this rank's queued work marked, the ranks
  // met, this rank's later work queued behind every other rank's mark. Returns every rank's inbox.
  std::vector<void*> meet();
  // This rank's inbox at least `bytes` long (grown and registered outside a capture: inside one, the
  // allocator refuses, and this rank's recording fails alone).
  void* inbox(size_t bytes);

  std::shared_ptr<LocalGroup> group_;
  int rank_;
  OpContext& ctx_;
  std::unique_ptr<ElementwiseKernel> k_;
  Tensor scratch_;
  Tensor inbox_;  // the issued collectives' (sized by a step's first run, as called)
  uint64_t seq_ = 0;
  size_t reducers_ = 0;  // bucket reducers made so far
};

// One communicator per rank over a fresh group.
std::vector<std::unique_ptr<Communicator>> make_local_comms(const std::vector<OpContext*>& contexts);

}  // namespace trainer
