// Gradient accumulation (train.accumulate: k micro-batches per optimizer step), the same for a
// replica and for each stage of a pipeline: the earlier micro-batches' gradient sum, kept beside
// one gradient store, and their statistics and stop request, kept for the step's last.
#pragma once
#include <cstdint>
#include <memory>

#include "core/ops/context.h"
#include "core/ops/elementwise.h"
#include "core/ops/softmax.h"
#include "core/tensor/tensor.h"

namespace trainer {

// The sum of a step's earlier micro-batches' gradients for one gradient store. The last
// micro-batch adds it back range by range (a replica: each bucket just before its all-reduce; a
// pipeline stage: all of it before its sum over the copies), so only one reduction a step is made.
class GradAccumulator {
 public:
  GradAccumulator(OpContext& ctx, int64_t floats);
  // The held sum += grads (the step's first micro-batch: = grads).
  void hold(const Tensor& grads, bool first);
  // grads[from, to) += the held sum's [from, to).
  void add_into(const Tensor& grads, int64_t from, int64_t to);
  void add_into(const Tensor& grads) { add_into(grads, 0, grads.numel()); }

 private:
  Tensor held_;
  std::unique_ptr<ElementwiseKernel> ew_;
};

// The statistics and stop requests of a step's earlier micro-batches: they return nothing and
// agree on nothing; the step's last returns the whole step's sums and the agreement.
struct HeldStats {
  LossStats stats;
  bool stop = false;
  // An earlier micro-batch: its stats and stop request kept; `stop` becomes false.
  void hold(const LossStats& s, bool& stop_request) {
    stats += s;
    stop = stop || stop_request;
    stop_request = false;
  }
  // The last: the step's sums and any stop request, then empty again.
  void release(LossStats& s, bool& stop_request) {
    s += stats;
    stop_request = stop_request || stop;
    *this = HeldStats{};
  }
};

}  // namespace trainer
