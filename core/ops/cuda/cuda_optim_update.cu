// CUDA optimizer updates: fused single-pass SGD, Adam(W) and RMSprop over flat f32 buffers (optim_math.h, shared with the CPU); the gradients' finiteness check, sum of squares and clipping; the weights' moving average.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"
#include <vector>

#include "core/ops/math/grad_clip_math.h"
#include "core/ops/math/step_state_math.h"
#include "core/ops/math/optim_math.h"
#include "core/ops/optim_update.h"

namespace trainer {
namespace {

// One element per iteration: optim_math.h's updates, the CPU's (nvcc may contract a*b + c into an
// fma, so results agree with the CPU to rounding, not bits).

// v == nullptr: no velocity (momentum 0): w -= lr * g'.
// `step` (device memory, may be null): this step's rate and scales, read where the update runs.
__global__ void sgd_kernel(float* w, const float* g, float* v, int64_t n, optim_math::SgdCoef k0, bool nesterov,
                           const StepScalars* step) {
  if (optim_math::skipped(step)) return;
  const optim_math::SgdCoef k = optim_math::with_step(k0, step);
  CUDA_GRID_LOOP(i, n) {
    if (!v) optim_math::sgd(w[i], g[i], k);
    else optim_math::sgd_momentum(w[i], v[i], g[i], k, nesterov);
  }
}

__global__ void adam_kernel(float* w, const float* g, float* m, float* v, int64_t n, optim_math::AdamCoef k0,
                            const StepScalars* step) {
  if (optim_math::skipped(step)) return;
  const optim_math::AdamCoef k = optim_math::with_step(k0, step);
  CUDA_GRID_LOOP(i, n) optim_math::adam(w[i], m[i], v[i], g[i], k);
}

// mom == nullptr: no momentum; mg == nullptr: not centered.
__global__ void rmsprop_kernel(float* w, const float* g, float* ms, float* mom, float* mg, int64_t n,
                               optim_math::RmspropCoef k0, const StepScalars* step) {
  if (optim_math::skipped(step)) return;
  const optim_math::RmspropCoef k = optim_math::with_step(k0, step);
  CUDA_GRID_LOOP(i, n) optim_math::rmsprop(w[i], ms[i], mom ? mom + i : nullptr, mg ? mg + i : nullptr, g[i], k);
}

// flag = 1 when some element is inf or NaN. Every writer writes the same value, so the answer
// does not depend on the order of threads (no atomics needed); flag is zeroed before the launch.
__global__ void nonfinite_kernel(const float* g, int64_t n, int* flag) {
  bool bad = false;
  CUDA_GRID_LOOP(i, n) bad |= !isfinite(g[i]);
  if (bad) *flag = 1;
}

// One block of kLanes threads per chunk: grad_clip_math.h's lanes and fold, so the chunk's sum has
// the CPU's bits.
__global__ void chunk_sum_squares_kernel(const float* g, int64_t n, double* part) {
  namespace m = grad_clip_math;
  __shared__ double lanes[m::kLanes];
  const int l = int(threadIdx.x);
  const int64_t base = int64_t(blockIdx.x) * m::kChunk;
  double acc = 0;
  for (int r = 0; r < m::kRounds; ++r) {
    const int64_t i = base + int64_t(r) * m::kLanes + l;
    if (i < n) acc += m::square(g[i]);
  }
  lanes[l] = acc;
  __syncthreads();
  for (int s = m::kLanes / 2; s > 0; s /= 2) {
    if (l < s) lanes[l] += lanes[l + s];
    __syncthreads();
  }
  if (l == 0) part[blockIdx.x] = lanes[0];
}

__global__ void clip_values_kernel(float* g, int64_t n, float scale, float limit) {
  CUDA_GRID_LOOP(i, n) g[i] = grad_clip_math::clip_value(g[i], scale, limit);
}

// A fixed step's decision (grad_clip_math::decide_step) on one thread: the chunks' sums added in
// chunk order (the host's order), the finiteness from nonfinite_kernel's flag (null: not checked).
__global__ void decide_step_kernel(StepRule r, const int* nonfinite, const double* part, int64_t chunks,
                                   StepScalars* step, StepCheck* check) {
  double sum = 0;
  for (int64_t c = 0; c < chunks; ++c) sum += part[c];
  grad_clip_math::decide_step(r, !(nonfinite && *nonfinite), sum, step, check);
}

// A part's measure (measure_step): its finiteness and its chunks' sums added in order, on one thread.
__global__ void measure_kernel(bool check_finite, const int* nonfinite, const double* part, int64_t chunks, StepCheck* out) {
  out->finite = check_finite && nonfinite && *nonfinite ? 0 : 1;
  double sum = 0;
  for (int64_t c = 0; c < chunks; ++c) sum += part[c];
  out->sum_squares = sum;
}

// The parts' measures in part order, and the step's decision (decide_parts), on one thread.
__global__ void decide_parts_kernel(StepRule r, const StepCheck* parts, int n, StepScalars* step, StepCheck* check) {
  const StepCheck all = grad_clip_math::combined(parts, n);
  grad_clip_math::decide_step(r, all.finite != 0, all.sum_squares, step, check);
}

// A fixed step's values from its state, and the state after its update (step_state_math), on one thread.
__global__ void begin_fixed_kernel(const StepState* state, StateRule r, StepScalars* step) {
  step_state_math::begin(*state, r, step);
}
__global__ void end_fixed_kernel(StepState* state, StateRule r, const StepScalars* step) {
  step_state_math::end(state, r, *step);
}

// clip_value's clip in a fixed step: unscaled by the step's 1/scale, nothing done when it is skipped.
__global__ void clip_values_step_kernel(float* g, int64_t n, float limit, const StepScalars* step) {
  if (step->skip) return;
  const float scale = step->unscale;
  CUDA_GRID_LOOP(i, n) g[i] = grad_clip_math::clip_value(g[i], scale, limit);
}

// train.ema's moving average (optim_math::averaged); `step` (may be null): nothing when the fixed
// step was skipped or does not average.
__global__ void average_kernel(float* a, const float* w, int64_t n, float decay, float rest, const StepScalars* step) {
  if (!optim_math::averages(step)) return;
  CUDA_GRID_LOOP(i, n) a[i] = optim_math::averaged(a[i], w[i], decay, rest);
}

class CudaOptimUpdate final : public OptimUpdateKernel {
 public:
  CudaOptimUpdate(OpContext& ctx, const OptimUpdateParams& p) : OptimUpdateKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void sgd_impl(Tensor& w, const Tensor& g, Tensor& velocity, const SgdStep& s) override {
    // Without a velocity buffer (allowed only when momentum is 0) the update is w -= lr*g'.
    const bool mom = velocity.defined();
    TRAINER_LAUNCH(sgd_kernel, cuda::grid_for(w.numel(), c_), cuda::kBlock, c_.stream(), w.f32(), g.f32(),
                   mom ? velocity.f32() : nullptr, w.numel(), optim_math::sgd_coef(s), s.nesterov, s.step);
  }

  void adam_impl(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) override {
    TRAINER_LAUNCH(adam_kernel, cuda::grid_for(w.numel(), c_), cuda::kBlock, c_.stream(), w.f32(), g.f32(), m.f32(),
                   v.f32(), w.numel(), optim_math::adam_coef(s), s.step);
  }

  void rmsprop_impl(Tensor& w, const Tensor& g, Tensor& ms, Tensor& mom, Tensor& mg, const RmspropStep& s) override {
    const bool use_mom = s.momentum != 0.0f;
    TRAINER_LAUNCH(rmsprop_kernel, cuda::grid_for(w.numel(), c_), cuda::kBlock, c_.stream(), w.f32(), g.f32(),
                   ms.f32(), use_mom ? mom.f32() : nullptr, s.centered ? mg.f32() : nullptr, w.numel(),
                   optim_math::rmsprop_coef(s), s.step);
  }

  void average_impl(Tensor& avg, const Tensor& w, float decay, float rest, const StepScalars* step) override {
    TRAINER_LAUNCH(average_kernel, cuda::grid_for(avg.numel(), c_), cuda::kBlock, c_.stream(), avg.f32(), w.f32(),
                   avg.numel(), decay, rest, step);
  }

  bool all_finite_impl(const Tensor& g) override {
    const int* flag = launch_nonfinite(g);
    int bad = 0;
    c_.copy_to_host(&bad, flag, sizeof(int));  // waits for the stream
    return bad == 0;
  }

  double sum_squares_impl(const Tensor& g) override {
    const int64_t chunks = grad_clip_math::chunks(g.numel());
    const double* part = launch_chunk_sums(g, chunks);
    host_part_.resize(size_t(chunks));
    c_.copy_to_host(host_part_.data(), part, size_t(chunks) * sizeof(double));  // waits for the stream
    double sum = 0;
    for (double p : host_part_) sum += p;  // in chunk order, as the CPU
    return sum;
  }

  void clip_values_impl(Tensor& g, float scale, float limit) override {
    TRAINER_LAUNCH(clip_values_kernel, cuda::grid_for(g.numel(), c_), cuda::kBlock, c_.stream(), g.f32(), g.numel(),
                   scale, limit);
  }

  void decide_step_impl(Tensor& g, const StepRule& r, StepScalars* step, StepCheck* check) override {
    const int64_t n = g.numel();
    const int* flag = r.check_finite ? launch_nonfinite(g) : nullptr;
    const int64_t chunks = r.clip != StepRule::None ? grad_clip_math::chunks(n) : 0;
    const double* part = chunks > 0 ? launch_chunk_sums(g, chunks) : nullptr;
    TRAINER_LAUNCH(decide_step_kernel, 1, 1, c_.stream(), r, flag, part, chunks, step, check);
    if (r.clip == StepRule::Value && n > 0)
      TRAINER_LAUNCH(clip_values_step_kernel, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), g.f32(), n,
                     float(r.limit), step);
  }

  void measure_step_impl(const Tensor& g, const StepRule& r, StepCheck* part) override {
    const int64_t n = g.numel();
    const int* flag = r.check_finite ? launch_nonfinite(g) : nullptr;
    const int64_t chunks = r.clip != StepRule::None && n > 0 ? grad_clip_math::chunks(n) : 0;
    const double* sums = chunks > 0 ? launch_chunk_sums(g, chunks) : nullptr;
    TRAINER_LAUNCH(measure_kernel, 1, 1, c_.stream(), r.check_finite, flag, sums, chunks, part);
  }

  void decide_parts_impl(Tensor& g, const StepRule& r, const StepCheck* parts, int n, StepScalars* step,
                         StepCheck* check) override {
    TRAINER_LAUNCH(decide_parts_kernel, 1, 1, c_.stream(), r, parts, n, step, check);
    const int64_t elems = g.numel();
    if (r.clip == StepRule::Value && elems > 0)
      TRAINER_LAUNCH(clip_values_step_kernel, cuda::grid_for(elems, c_), cuda::kBlock, c_.stream(), g.f32(), elems,
                     float(r.limit), step);
  }

  void begin_fixed_impl(StepState* state, const StateRule& r, StepScalars* step) override {
    TRAINER_LAUNCH(begin_fixed_kernel, 1, 1, c_.stream(), state, r, step);
  }
  void end_fixed_impl(StepState* state, const StateRule& r, const StepScalars* step) override {
    TRAINER_LAUNCH(end_fixed_kernel, 1, 1, c_.stream(), state, r, step);
  }

  // flag_ = 1 where g holds an inf or NaN, else 0 (queued on the stream; nothing waits).
  const int* launch_nonfinite(const Tensor& g) {
    if (!flag_.defined()) flag_ = Tensor::empty(Shape{1}, DType::I32, c_.allocator());
    int* flag = static_cast<int*>(flag_.data());
    c_.fill_zero(flag, sizeof(int));
    if (g.numel() > 0)
      TRAINER_LAUNCH(nonfinite_kernel, cuda::grid_for(g.numel(), c_), cuda::kBlock, c_.stream(), g.f32(), g.numel(), flag);
    return flag;
  }
  // The `chunks` per-chunk sums of squares of g into part_ (queued; grad_clip_math's order).
  const double* launch_chunk_sums(const Tensor& g, int64_t chunks) {
    double* part = part_.as<double>(c_, size_t(chunks));
    TRAINER_LAUNCH(chunk_sum_squares_kernel, unsigned(chunks), grad_clip_math::kLanes, c_.stream(), g.f32(), g.numel(),
                   part);
    return part;
  }

  CudaContext& c_;
  Tensor flag_;  // all_finite's answer on the device
  Scratch part_;  // sum_squares's per-chunk sums on the device (a model's size: grown once)
  std::vector<double> host_part_;
};

static RegisterKernel<OptimUpdateKernel, CudaOptimUpdate> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
