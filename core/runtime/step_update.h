// StepUpdate: the one optimizer update of a training step, for every strategy — once the step's
// gradients are reduced: the finite check (loss scaling), the global norm and clipping, each
// part's optimizer step, the loss scale's update.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/optim/grad_clip.h"
#include "core/optim/loss_scale.h"
#include "core/optim/optimizer.h"

namespace trainer {

// One optimizer over one part of the model: a replica has one, a pipeline one per stage.
struct UpdatePart {
  Optimizer* optimizer = nullptr;
  // Gradient ranges [begin, end) another part holds too (the later copies of a layer shared across
  // stages, which hold the same summed gradient): left out of the global norm, counted once.
  std::vector<std::pair<int64_t, int64_t>> counted_elsewhere;
};

// fn(i) for every part i, each on its part's thread (a pipeline's stage threads); returns when
// every part's has.
using ForEachPart = std::function<void(const std::function<void(int)>& fn)>;

// Every copy of the model holds the same reduced gradients, so every copy (every replica, and
// every stage of a pipeline together) takes the same decision and measures the same norm, with
// no collective: all keep the same scale and skip the same steps.
class StepUpdate {
 public:
  StepUpdate() = default;
  StepUpdate(const LossScaleOptions& scale, const GradClipOptions& clip) : scaler_(scale), clip_(clip) {}

  LossScaler& scaler() { return scaler_; }
  const LossScaler& scaler() const { return scaler_; }
  const GradClip& clip() const { return clip_; }
  // The loss gradient's factor for this step (1 without loss scaling).
  float loss_scale() const { return scaler_.scale(); }
  // Whether the update needs every reduced gradient before any part of it: the finite check and
  // the norm do. Otherwise a replica may update each gradient bucket as its all-reduce finishes
  // (begin_step, then update over each bucket: the same bits as one step over all of them).
  bool whole_gradient() const { return scaler_.enabled() || clip_.enabled(); }

  // The step: finite check over every part (loss scaling), the norm over every part (clipping),
  // clip and step each part, update the scale. Returns false when the step was skipped (an inf
  // or NaN gradient somewhere): no part updated, the optimizers' step counts unchanged.
  bool apply(const std::vector<UpdatePart>& parts, const ForEachPart& each, float lr);

  // The same update in a fixed step (a recorded program: nothing read back before it ends), for
  // one part holding every gradient: rule() is what its kernels decide (Optimizer::decide_step),
  // state_rule() how the scale they keep moves (Optimizer::end_fixed), and settle() — once the
  // step's check is read with its loss — keeps the host's scale, skip counts and norm as apply()
  // would have (the optimizer's step count is the caller's). Returns whether it updated.
  StepRule rule() const;
  StateRule state_rule() const;  // how the scale moves where the fixed step keeps it (StepState)
  bool settle(const StepCheck& c);

 private:
  LossScaler scaler_;
  GradClip clip_;
};

}  // namespace trainer
