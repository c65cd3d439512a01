// CommStats: batch-norm statistics over every rank of a communicator (sync_bn), for Layer::set_sync.
#pragma once
#include <vector>

#include "core/dist/communicator.h"
#include "core/graph/layer.h"

namespace trainer {

class CommStats final : public StatsSync {
 public:
  explicit CommStats(Communicator& c) : c_(c) {}
  int replicas() const override { return c_.size(); }
  void all_reduce_sum(std::vector<double>& v) override { c_.all_reduce_host(v); }

 private:
  Communicator& c_;
};

}  // namespace trainer
