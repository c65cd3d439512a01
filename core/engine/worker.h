// Worker: one data-parallel replica — its step (forward, loss, backward with bucketed
// all-reduce overlapping it, the optimizer per bucket), evaluation of its shard, and the
// per-step synchronisation that keeps every replica identical.
//
// Per training step every rank meets the others at, in order:
//   1. one all-reduce per gradient bucket (communication thread, while backward continues);
//   2. a broadcast of rank 0's non-trained parameters (batch-norm running statistics);
//   3. a host all-reduce of the step's loss sum, correct count and sample count.
// (With sync_bn, each batch-norm layer adds two host all-reduces in forward and backward.)
#pragma once
#include <memory>

#include "core/data/loader.h"
#include "core/engine/grad_buckets.h"
#include "core/engine/replica.h"
#include "core/engine/trainee.h"

namespace trainer {

class Worker final : public Trainee {
 public:
  Worker(const Experiment& e, int rank, Device device, int threads);
  // Connects the worker to its communicators (made once every replica's context exists):
  // `grad` is used only by the gradient communication thread, `ctl` only by the worker thread.
  void attach(Communicator& grad, Communicator& ctl);

  int rank() const override { return rank_; }
  ModelState& state() override { return rep_->state(); }
  Replica& replica() { return *rep_; }
  Communicator& control() { return *ctl_; }
  // Binds this thread to the replica's device (call first on the worker thread).
  void bind_thread() { rep_->context().bind_thread(); }
  // Makes every replica start from rank 0's initial parameters.
  void broadcast_parameters() override;

  // One step on this rank's shard `b`; returns the step's stats summed over all replicas.
  // `stop`: in, this rank asks to stop after this step; out, some rank asked (all ranks agree).
  LossStats train_step(const Batch& b, float lr, uint64_t seed, bool& stop) override;
  // Loss and accuracy sums over this rank's shard of a loader pass, summed over all replicas.
  LossStats evaluate(Loader& loader) override;

  const GradBuckets& buckets() const { return *buckets_; }

 private:
  int rank_;
  bool sync_bn_;
  int64_t bucket_floats_;
  std::unique_ptr<Replica> rep_;
  Communicator* ctl_ = nullptr;
  std::unique_ptr<GradBuckets> buckets_;
};

}  // namespace trainer
