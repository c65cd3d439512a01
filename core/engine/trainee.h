// Trainee: what the epoch loop drives on one thread — a data-parallel replica (Worker) or a
// device-parallel model whose stages run on threads of their own (PipelineWorker).
#pragma once
#include <cstdint>

#include "core/data/loader.h"
#include "core/engine/model_state.h"
#include "core/ops/softmax.h"
#include "core/optim/loss_scale.h"

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

  // Loss scaling (train.loss_scale): the scale and the skipped-step counters. Every rank (every
  // stage) decides from the same reduced gradients, so all of them hold the same state.
  LossScaler& scaler() { return scaler_; }
  // Test hook (TRAINER_INJECT_NONFINITE): the next train_step puts an inf into one gradient —
  // data parallel: rank 0's first trainable gradient, before its all-reduce; device parallel:
  // the first stage's that has trainable parameters — as an fp16 overflow in backward would.
  void inject_nonfinite() { inject_ = true; }

 protected:
  LossScaler scaler_;
  bool inject_ = false;
};

}  // namespace trainer
