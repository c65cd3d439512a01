// Communicator: the collectives that keep data-parallel replicas in step (sum all-reduce,
// broadcast, small host reductions, barrier), and abort, which wakes every waiting rank.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dist/bucket_reducer.h"
#include "core/ops/context.h"

namespace trainer {

// A collective failed or was aborted because another rank failed (the CLI exits 4).
class CommError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place element-wise sum over the ranks of a float tensor on this rank's device; every
  // rank passes a tensor of the same length. Deterministic for a fixed number of ranks and
  // identical on every rank (LocalComm sums each element in rank order 0..N-1; NCCL's ring/tree
  // order is fixed for a fixed topology).
  virtual void all_reduce_sum(Tensor& buf) = 0;
  // Every rank's `buf` takes root's values.
  virtual void broadcast(Tensor& buf, int root) = 0;
  // In-place sum over the ranks of a few host values (metrics, batch-norm statistics).
  virtual void all_reduce_host(std::vector<double>& values) = 0;
  virtual void barrier() = 0;
  // Makes every pending and future collective of every rank throw CommError(why).
  virtual void abort(const std::string& why) = 0;
  // A reducer of `grads` (this rank's flat gradients, cut into `buckets`, the same on every rank)
  // that the ranks' own threads drive (bucket_reducer.h), or null where reductions belong on a
  // thread or stream of their own (device memory, NCCL). Every rank calls it once per gradient
  // buffer, in the same order; its collectives are its own, apart from this communicator's.
  virtual std::unique_ptr<BucketReducer> make_bucket_reducer(Tensor& /*grads*/, const std::vector<BucketRange>& /*buckets*/) {
    return nullptr;
  }

  // Collectives inside a recorded step (a CUDA graph): `issue_*` put the collective on this rank's
  // stream without waiting for it, so that a capture of that stream records it (NCCL ≥ 2.9; the
  // in-process communicator of one GPU listed N times, in pieces between host rendezvous);
  // wait_issued() waits, abortably, for everything issued. records(): whether issue_* can be
  // recorded. Here (MPI between processes) they are the waiting collectives, correct wherever the
  // step runs as called.
  virtual bool records() const { return false; }
  virtual void issue_all_reduce_sum(Tensor& buf) { all_reduce_sum(buf); }
  virtual void issue_broadcast(Tensor& buf, int root) { broadcast(buf, root); }
  // Every rank's part of `buf` (size() equal parts, rank r's at r/size() of it, a byte copy: no
  // arithmetic) into every rank's `buf`. Here one broadcast per rank; NCCL's is one ncclAllGather.
  virtual void issue_all_gather(Tensor& buf) {
    const int64_t n = gather_part(buf);
    for (int r = 0; r < size(); ++r) {
      Tensor part = buf.slice(r * n, (r + 1) * n);
      issue_broadcast(part, r);
    }
  }
  virtual void wait_issued() {}
  // A gradient bucket's sum while backward goes on, inside a recorded step: start_all_reduce_sum
  // queues the sum of `buf` behind the work queued on this rank's stream so far, to run beside what
  // is queued there next; join_started() puts the stream's later work behind every sum started (a
  // capture records the fork and the join). overlaps(): whether started sums run beside later work
  // (NCCL: on a stream of the communicator's own). Here start is issue (in the stream's order) and
  // join nothing.
  virtual bool overlaps() const { return false; }
  virtual void start_all_reduce_sum(Tensor& buf) { issue_all_reduce_sum(buf); }
  virtual void join_started() {}
  // Throws CommError where this rank's group was aborted (NCCL: after aborting this rank's
  // communicator, so that collectives it queued that no peer will join end) or reported an
  // asynchronous error; nothing otherwise. For a rank that waits for its device's work another way
  // (a step's statistics read late), polled while it waits, and when a host agreement failed.
  virtual void check_abort() {}

 protected:
  // The size of each rank's part of an all-gather's `buf` (a flat tensor of size() equal parts).
  int64_t gather_part(const Tensor& buf) const {
    const int64_t n = size() > 0 ? buf.numel() / size() : 0;
    if (buf.dim(0) != buf.numel() || n * size() != buf.numel())
      throw std::logic_error("issue_all_gather: " + buf.shape().str() + " is not " + std::to_string(size()) + " equal parts");
    return n;
  }
};

// A communicator of one rank: every collective is the identity (single-device runs).
class SoloComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(Tensor&) override {}
  void broadcast(Tensor&, int) override {}
  void all_reduce_host(std::vector<double>&) override {}
  void barrier() override {}
  void abort(const std::string&) override {}
};

}  // namespace trainer
