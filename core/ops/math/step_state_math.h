// A fixed step's values derived where it runs from StepState, and the state advanced after its update: the host's LossScaler, GradClip and Adam arithmetic, shared by the CPU and CUDA kernels.
#pragma once
#include <math.h>
#include <stdint.h>

#include "core/ops/math/hd.h"
#include "core/ops/step_scalars.h"

namespace trainer::step_state_math {

// The step's scalars from the state (before its update) and the host's values: the loss
// gradient's factor 1/scored × scale (Trainee::step's), 1/scale and the update's factor
// (StepUpdate::fill), Adam's corrections and the moving average's cadence at the count the update
// takes the optimizer to (Optimizer::step_scalars, WeightAverage::averages_at), no skip yet.
TRAINER_HD_INLINE void begin(const StepState& state, const StateRule& r, StepScalars* step) {
  step->loss_scale = mul_rn(step->inv_scored, state.scale);
  step->unscale = div_rn(1.0f, state.scale);
  step->grad_scale = r.clip_value ? 1.0f : step->unscale;
  const int64_t t = state.updates + 1;
  const int at = int(t % StepScalars::kBiasRing);
  step->bias1 = step->bias_ring[at][0];
  step->bias2 = step->bias_ring[at][1];
  step->average = step->average_every > 0 && t % int64_t(step->average_every) == 0 ? 1u : 0u;
  step->skip = 0;
}

// The state after the step's update was decided (step->skip): LossScaler::update's arithmetic —
// a skipped step backs the scale off (dynamic) and leaves the count; a finite one counts, and
// `growth_interval` of them in a row grow the scale where it stays finite.
TRAINER_HD_INLINE void end(StepState* state, const StateRule& r, const StepScalars& step) {
  if (step.skip) {
    if (r.mode == StateRule::Dynamic) {
      state->scale = mul_rn(state->scale, r.backoff_factor);
      state->good_steps = 0;
    }
    return;
  }
  state->updates += 1;
  if (r.mode != StateRule::Dynamic) return;
  if (++state->good_steps == r.growth_interval) {
    const float grown = mul_rn(state->scale, r.growth_factor);
    if (isfinite(grown)) state->scale = grown;
    state->good_steps = 0;
  }
}

}  // namespace trainer::step_state_math
