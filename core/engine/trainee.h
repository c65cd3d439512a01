// Trainee: what the epoch loop drives on one thread — a data-parallel replica (Worker) or a
// device-parallel model whose stages run on threads of their own (PipelineWorker).
#pragma once
#include <cstdint>

#include "core/data/loader.h"
#include "core/engine/model_state.h"
#include "core/ops/softmax.h"

namespace trainer {

class Trainee {
 public:
  virtual ~Trainee() = default;
  virtual int rank() const = 0;
  // The parameters and optimizer state (checkpoints, restore-best).
  virtual ModelState& state() = 0;
  // Makes every copy start from rank 0's initial parameters.
  virtual void broadcast_parameters() = 0;
  // One step on this rank's batch `b`; returns the step's stats summed over all ranks.
  // `stop`: in, this rank asks to stop after this step; out, some rank asked (all ranks agree).
  virtual LossStats train_step(const Batch& b, float lr, uint64_t seed, bool& stop) = 0;
  // Loss and accuracy sums over this rank's shard of a loader pass, summed over all ranks.
  virtual LossStats evaluate(Loader& loader) = 0;
};

}  // namespace trainer
