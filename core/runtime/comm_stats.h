// CommStats: batch-norm statistics over every rank of a communicator (sync_bn), for Layer::set_sync.
#pragma once
#include "core/dist/communicator.h"
#include "core/graph/layer.h"

namespace trainer {

class CommStats final : public StatsSync {
 public:
  explicit CommStats(Communicator& c) : c_(c) {}
  int replicas() const override { return c_.size(); }
  // Issued (Communicator::issue_all_reduce_sum): on the replica's queue, recorded with a captured
  // step (NCCL; the in-process communicator of one GPU listed N times); MPI's meets the other
  // processes as called.
  void all_reduce_sum(Tensor& v) override { c_.issue_all_reduce_sum(v); }

 private:
  Communicator& c_;
};

}  // namespace trainer
