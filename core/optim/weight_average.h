// WeightAverage: train.ema's exponential moving average of one model copy's weights — every
// parameter, batch-norm statistics included (as PyTorch's AveragedModel with buffers) — in fp32
// on the copy's device.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/ops/context.h"
#include "core/ops/elementwise.h"
#include "core/ops/optim_update.h"

namespace trainer {

// `train.ema: {decay, every}`: after every `every`-th optimizer step, avg = decay·avg + (1 − decay)·w.
struct WeightAverageOptions {
  double decay = 0;  // 0: off
  int every = 1;
  bool enabled() const { return decay > 0; }
};

class WeightAverage {
 public:
  // `weights`: the copy's whole flat weight buffer. Allocates the average once; nothing is
  // allocated afterwards.
  WeightAverage(OpContext& ctx, Tensor weights, const WeightAverageOptions& o);

  // Before a step: the average starts from the weights as training starts (fresh, from
  // init.from, or resumed from a checkpoint without an average); a no-op once started.
  void start();
  // After a step that left the optimizer at `optimizer_steps`: averages when the count moved (a
  // step skipped for inf/NaN gradients does not) onto a multiple of `every`.
  void update(int64_t optimizer_steps);
  // A fixed step's (the average inside the recorded program): whether the step that takes the
  // optimizer to `optimizer_steps` averages (StepScalars::average) ...
  bool averages_at(int64_t optimizer_steps) const { return optimizer_steps % every_ == 0; }
  int every() const { return every_; }
  // ... the update itself, reading `step` where it runs (skipped or not averaging: nothing) ...
  void update_in_step(const StepScalars* step);
  // ... and, once the step is done, the count it left (what update() would have averaged at).
  void followed(int64_t optimizer_steps) { last_steps_ = optimizer_steps; }

  // Host copies (checkpoints, validation with the average). Uploading starts it.
  std::vector<float> download();
  void upload(const std::vector<float>& values);
  bool started() const { return started_; }

 private:
  OpContext& ctx_;
  Tensor w_, avg_;
  float decay_;
  int every_;
  bool started_ = false;
  int64_t last_steps_ = -1;
  std::unique_ptr<ElementwiseKernel> ew_;   // the start's copy
  std::unique_ptr<OptimUpdateKernel> avg_k_;  // the update, one pass
};

}  // namespace trainer
