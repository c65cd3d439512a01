// CPU optimizer updates: fused single-pass SGD, Adam(W) and RMSprop over flat f32 buffers (optim_math.h's per-element updates); the gradients' finiteness check, sum of squares and clipping; the weights' moving average.
#include <cmath>
#include <vector>

#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/grad_clip_math.h"
#include "core/ops/math/step_state_math.h"
#include "core/ops/math/optim_math.h"
#include "core/ops/optim_update.h"

namespace trainer {
namespace {

// The moving average's loop, compiled without floating-point contraction: each product rounded to
// fp32 before the sum, as the element-wise passes round them (g++ -march=native would otherwise
// fuse one product and the sum into an fma; clang contracts only within an expression, which
// optim_math::averaged splits). Checked against those passes, bit for bit.
#if !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
void average_loop(float* __restrict a, const float* __restrict w, int64_t n, float decay, float rest) {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) a[i] = optim_math::averaged(a[i], w[i], decay, rest);
}
#if !defined(__clang__)
#pragma GCC pop_options
#endif

class CpuOptimUpdate final : public OptimUpdateKernel {
 public:
  CpuOptimUpdate(OpContext& ctx, const OptimUpdateParams& p) : OptimUpdateKernel(ctx, p) {}

 private:
  void sgd_impl(Tensor& w, const Tensor& g, Tensor& velocity, const SgdStep& s) override {
    if (optim_math::skipped(s.step)) return;
    // Without a velocity buffer (allowed only when momentum is 0) the update is w -= lr*g'.
    const bool mom = velocity.defined();
    float* __restrict wp = w.f32();
    const float* __restrict gp = g.f32();
    int64_t n = w.numel();
    const optim_math::SgdCoef k = optim_math::with_step(optim_math::sgd_coef(s), s.step);
    if (!mom) {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) optim_math::sgd(wp[i], gp[i], k);
      return;
    }
    float* __restrict vp = velocity.f32();
    // Nesterov or not as separate loops: the flag is a constant inside each.
    if (s.nesterov) {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) optim_math::sgd_momentum(wp[i], vp[i], gp[i], k, true);
    } else {
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) optim_math::sgd_momentum(wp[i], vp[i], gp[i], k, false);
    }
  }

  void adam_impl(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) override {
    if (optim_math::skipped(s.step)) return;
    float* __restrict wp = w.f32();
    const float* __restrict gp = g.f32();
    float* __restrict mp = m.f32();
    float* __restrict vp = v.f32();
    int64_t n = w.numel();
    const optim_math::AdamCoef k = optim_math::with_step(optim_math::adam_coef(s), s.step);
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) optim_math::adam(wp[i], mp[i], vp[i], gp[i], k);
  }

  void rmsprop_impl(Tensor& w, const Tensor& g, Tensor& ms, Tensor& mom, Tensor& mg, const RmspropStep& s) override {
    if (optim_math::skipped(s.step)) return;
    const bool use_mom = s.momentum != 0.0f;
    float* __restrict wp = w.f32();
    const float* __restrict gp = g.f32();
    float* __restrict sp = ms.f32();
    float* __restrict op = use_mom ? mom.f32() : nullptr;
    float* __restrict cp = s.centered ? mg.f32() : nullptr;
    int64_t n = w.numel();
    const optim_math::RmspropCoef k = optim_math::with_step(optim_math::rmsprop_coef(s), s.step);
#pragma omp parallel for schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i)
      optim_math::rmsprop(wp[i], sp[i], op ? op + i : nullptr, cp ? cp + i : nullptr, gp[i], k);
  }

  bool all_finite_impl(const Tensor& g) override {
    const float* __restrict gp = g.f32();
    const int64_t n = g.numel();
    // x - x is 0 for a finite x and NaN for inf or NaN: no branch, vectorises; any NaN in the sum
    // makes it NaN (an order-independent answer).
    float bad = 0.0f;
#pragma omp parallel for simd schedule(static) reduction(+ : bad) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) bad += gp[i] - gp[i];
    return bad == 0.0f;
  }

  double sum_squares_impl(const Tensor& g) override {
    const float* gp = g.f32();
    const int64_t n = g.numel(), chunks = grad_clip_math::chunks(n);
    part_.resize(size_t(chunks));  // kept: a model's size, so no allocation after the first step
    double* part = part_.data();
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) part[c] = grad_clip_math::chunk_sum_squares(gp, n, c);
    double sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += part[c];  // in chunk order, as the GPU's host sum
    return sum;
  }

  void clip_values_impl(Tensor& g, float scale, float limit) override {
    float* __restrict gp = g.f32();
    const int64_t n = g.numel();
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) gp[i] = grad_clip_math::clip_value(gp[i], scale, limit);
  }

  void decide_step_impl(Tensor& g, const StepRule& r, StepScalars* step, StepCheck* check) override {
    const bool finite = !r.check_finite || all_finite_impl(g);
    const double squares = r.clip != StepRule::None && g.numel() > 0 ? sum_squares_impl(g) : 0.0;
    grad_clip_math::decide_step(r, finite, squares, step, check);
    if (r.clip == StepRule::Value && !step->skip && g.numel() > 0) clip_values_impl(g, step->unscale, float(r.limit));
  }

  void measure_step_impl(const Tensor& g, const StepRule& r, StepCheck* part) override {
    part->finite = !r.check_finite || all_finite_impl(g) ? 1 : 0;
    part->sum_squares = r.clip != StepRule::None && g.numel() > 0 ? sum_squares_impl(g) : 0.0;
  }
  void decide_parts_impl(Tensor& g, const StepRule& r, const StepCheck* parts, int n, StepScalars* step,
                         StepCheck* check) override {
    const StepCheck all = grad_clip_math::combined(parts, n);
    grad_clip_math::decide_step(r, all.finite != 0, all.sum_squares, step, check);
    if (r.clip == StepRule::Value && !step->skip && g.numel() > 0) clip_values_impl(g, step->unscale, float(r.limit));
  }

  void begin_fixed_impl(StepState* state, const StateRule& r, StepScalars* step) override {
    step_state_math::begin(*state, r, step);
  }
  void end_fixed_impl(StepState* state, const StateRule& r, const StepScalars* step) override {
    step_state_math::end(state, r, *step);
  }

  void average_impl(Tensor& avg, const Tensor& w, float decay, float rest, const StepScalars* step) override {
    if (optim_math::averages(step)) average_loop(avg.f32(), w.f32(), avg.numel(), decay, rest);
  }

  std::vector<double> part_;  // sum_squares's per-chunk sums
};

static RegisterKernel<OptimUpdateKernel, CpuOptimUpdate> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
