// Shared by the single-replica training tests: steps of configs/smoke.yaml's training data with a fixed batch order.
#pragma once
#include <vector>

#include "core/data/loader.h"
#include "core/run/spec.h"
#include "core/runtime/data_parallel/replica.h"

namespace trainer::test {

// `steps` training steps of `rep` at learning rate `lr` on e's training set (batch 32, loader seed
// 1, one worker: every run sees the same batches in the same order); appends each step's mean
// loss to `losses` when given.
inline void train_steps(const RunSpec& e, Replica& rep, int steps, float lr, std::vector<double>* losses = nullptr) {
  auto ds = make_dataset(e.data.train, ".");
  LoaderOptions lo;
  lo.batch_size = 32;
  lo.seed = 1;
  lo.workers = 1;
  Loader loader(ds, lo);
  loader.start_epoch(0);
  Batch b;
  for (int s = 0; s < steps; ++s) {
    if (!loader.next(b)) loader.start_epoch(s), loader.next(b);
    LossStats st = rep.train_step(b.images, b.labels, lr, uint64_t(s));
    if (losses) losses->push_back(st.loss_sum / double(st.count));
  }
}

}  // namespace trainer::test
