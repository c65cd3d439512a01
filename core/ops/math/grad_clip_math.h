// Gradient clipping's arithmetic shared by the CPU and CUDA kernels: the sum of squares in one fixed order (bit-identical on both) and the per-element clamp.
#pragma once
#include <math.h>
#include <stdint.h>

#include "core/ops/math/hd.h"
#include "core/ops/step_scalars.h"

namespace trainer::grad_clip_math {

// The sum of squares of n floats is taken chunk by chunk: chunk c is kLanes lanes, lane l summing
// x[c·kChunk + r·kLanes + l] for r = 0 .. kRounds-1 in order (absent elements add nothing), then
// the lanes folded pairwise (l += l + s for s = kLanes/2 .. 1); the chunks' sums are then added in
// chunk order on the host. Each square of a float is exact in double, so a fused multiply-add
// rounds as a multiply then an add does: the CPU (a loop over lanes) and the GPU (a block of
// kLanes threads per chunk) give the same bits, independent of the thread count.
constexpr int kLanes = 256;
constexpr int kRounds = 64;
constexpr int64_t kChunk = int64_t(kLanes) * kRounds;

inline int64_t chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }

TRAINER_HD_INLINE double square(float v) { return double(v) * double(v); }

// Folds lanes[0 .. kLanes) into lanes[0] in the fixed pairwise order (the CPU's; the GPU's block
// does the same steps in shared memory).
inline double fold(double* lanes) {
  for (int s = kLanes / 2; s > 0; s /= 2)
    for (int l = 0; l < s; ++l) lanes[l] += lanes[l + s];
  return lanes[0];
}

// Chunk c's sum of squares of x[0, n) (the CPU's loop; the GPU's block computes the same bits).
inline double chunk_sum_squares(const float* x, int64_t n, int64_t c) {
  double lanes[kLanes] = {};
  const int64_t base = c * kChunk;
  for (int r = 0; r < kRounds; ++r) {
    const int64_t at = base + int64_t(r) * kLanes;
    const int64_t m = n - at < kLanes ? n - at : kLanes;
    for (int64_t l = 0; l < m; ++l) lanes[l] += square(x[at + l]);
  }
  return fold(lanes);
}

// The global norm of the unscaled gradients from their (scaled) sum of squares.
TRAINER_HD_INLINE double unscaled_norm(double sum_squares, float inv_scale) {
  return mul_rn(sqrt(sum_squares), double(inv_scale));
}

// The factor the gradients are multiplied by for a global norm `norm` and limit `max_norm`.
// Keras (clip_by_global_norm, keras/src/optimizers/base_optimizer.py): max_norm / max(norm,
// max_norm). PyTorch (torch.nn.utils.clip_grad_norm_): min(1, max_norm / (norm + 1e-6)). A NaN
// norm gives 1: NaN gradients stay NaN (and the loss says so) rather than a factor hiding them.
TRAINER_HD_INLINE double clip_coefficient(double norm, double max_norm, bool keras) {
  if (keras) return max_norm / (norm > max_norm ? norm : max_norm);
  const double c = max_norm / (norm + 1e-6);
  return c < 1.0 ? c : 1.0;
}

// The optimizer's gradient factor under clip_norm: 1/scale × the coefficient, in float.
TRAINER_HD_INLINE float clipped_grad_scale(double norm, float inv_scale, double max_norm, bool keras) {
  return float(mul_rn(double(inv_scale), clip_coefficient(norm, max_norm, keras)));
}

// A fixed step's decision (one thread on the device, StepUpdate's on the host): from the
// gradients' finiteness and sum of squares, the step skipped (loss scaling, not finite) or its
// gradient factor under clip_norm; the check recorded for the host. step->unscale and
// step->grad_scale hold the host's values (1/scale; 1/scale or, for clip_value, 1) on entry.
// The parts' measures of a model held in parts, in part order: finite when every part is, the sums
// of squares added in that order from 0 (StepUpdate::apply's order on the host).
TRAINER_HD_INLINE StepCheck combined(const StepCheck* parts, int n) {
  StepCheck all;
  all.finite = 1;
  all.sum_squares = 0;
  for (int i = 0; i < n; ++i) {
    all.finite = all.finite && parts[i].finite ? 1 : 0;
    all.sum_squares += parts[i].sum_squares;
  }
  return all;
}

TRAINER_HD_INLINE void decide_step(const StepRule& r, bool finite, double sum_squares, StepScalars* step,
                                   StepCheck* check) {
  check->finite = finite ? 1 : 0;
  check->sum_squares = sum_squares;
  step->skip = r.check_finite && !finite ? 1u : 0u;
  if (step->skip || r.clip != StepRule::Norm) return;
  const double norm = unscaled_norm(sum_squares, step->unscale);
  step->grad_scale = clipped_grad_scale(norm, step->unscale, r.limit, r.keras);
}

// One gradient element unscaled (× scale) and clipped to [-limit, limit] (Keras's clipvalue,
// torch.nn.utils.clip_grad_value_). NaN stays NaN.
TRAINER_HD_INLINE float clip_value(float g, float scale, float limit) {
  const float v = g * scale;
  return v > limit ? limit : (v < -limit ? -limit : v);
}

}  // namespace trainer::grad_clip_math
