// CUDA softmax: last-axis softmax forward/backward and fused softmax cross-entropy with accuracy (one block per row, deterministic reductions).
#include <climits>
#include <stdexcept>
#include <utility>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_loss_sums.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/softmax.h"
#include "core/ops/math/softmax_math.h"

namespace trainer {
namespace {

using cuda::block_max;
using cuda::block_sum;

// ---------------------------------------------------------------------------------------------
// Kernels: block b handles rows b, b + gridDim.x, ...; thread t handles columns t, t + blockDim.x, ...
// Every thread of a block runs every iteration (the row loop is uniform), so the reductions'
// __syncthreads are reached by all.

// y = exp(x - max) / sum(exp(x - max)). y may alias x: all of a row is read (for the max) before
// a thread writes, and each thread writes only the columns it read.
__global__ void softmax_fwd_kernel(const float* x, float* y, int64_t rows, int64_t C) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* a = x + r * C;
    float* o = y + r * C;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) mx = softmax_math::max_step(mx, a[j]);
    mx = block_max(mx);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      float e = softmax_math::exp_shifted(a[j], mx);
      o[j] = e;
      s += e;
    }
    s = block_sum(s);
    const float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) o[j] *= inv;
  }
}

// dx = y * (dy - sum(dy * y)). dx may alias dy (the dot is complete before any write).
__global__ void softmax_bwd_kernel(const float* y, const float* dy, float* dx, int64_t rows, int64_t C) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* a = y + r * C;
    const float* g = dy + r * C;
    float* o = dx + r * C;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) dot += a[j] * g[j];
    dot = block_sum(dot);
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) o[j] = softmax_math::softmax_grad(a[j], g[j], dot);
  }
}

// Per-sample cross-entropy as cpu_softmax.cpp: lse = log(sum exp(x - max)) in double; the loss is
// lse - (x[label] - max) (index labels) or -sum_j t_j (x_j - max - lse) over t_j != 0 (probability
// labels); hit = argmax(x) == label (resp. argmax(t)); d = (exp(x - max - lse) - target) * scale.
// status[i]: 1 hit, 0 miss, -1 label out of range, -2 label ignored (ignore: ignore_class; both
// without loss, d's row zeroed). `step` (device memory, may be null): grad_scale is
// step->loss_scale times grad_scale0, read here.
// cw: the class weights [C] (softmax_math::class_weight) or nullptr.
template <bool kSparse>
__global__ void xent_rows_kernel(const float* x, const int32_t* lab, const float* t, float* d, float grad_scale0,
                                 const StepScalars* step, float ls, bool ignore, int32_t ignore_class,
                                 const float* cw, int64_t N, int64_t C, double* losses, int32_t* status) {
  const float grad_scale = step ? step->loss_scale * grad_scale0 : grad_scale0;
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const float* a = x + i * C;
    float* dr = d ? d + i * C : nullptr;
    int64_t label = 0;
    if constexpr (kSparse) {
      const int32_t l = lab[i];  // the same value in every thread: the branch is uniform
      const bool skipped = softmax_math::label_ignored(l, ignore, ignore_class);
      if (skipped || !softmax_math::label_in_range(l, C)) {
        if (threadIdx.x == 0) {
          losses[i] = 0.0;
          status[i] = skipped ? -2 : -1;
        }
        if (dr)
          for (int64_t j = threadIdx.x; j < C; j += blockDim.x) dr[j] = 0.0f;
        continue;
      }
      label = l;
    }
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) mx = softmax_math::max_step(mx, a[j]);
    mx = block_max(mx);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) s += softmax_math::lse_term(a[j], mx);
    s = block_sum(s);
    const float lse = softmax_math::lse_of(s);
    const long long pred = cuda::row_argmax(a, C);
    double loss;
    bool hit;
    int64_t cls;
    if constexpr (kSparse) {
      double shift_sum = 0.0;
      if (ls != 0.0f) {  // uniform across the block
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) shift_sum += softmax_math::shift_term(a[j], mx);
        shift_sum = block_sum(shift_sum);
      }
      loss = softmax_math::smoothed_sparse_loss(softmax_math::sparse_loss(lse, a[label], mx), lse, shift_sum, ls, C);
      cls = label;
      hit = pred == label;
    } else {
      const float* tr = t + i * C;
      double l = 0.0;
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
        softmax_math::dense_loss_add(l, softmax_math::smooth(tr[j], ls, C), a[j], mx, lse);
      loss = block_sum(l);
      cls = cuda::row_argmax(tr, C);
      hit = pred == cls;
    }
    const float w = softmax_math::class_weight(cw, cls);
    if (cw) loss *= double(w);
    if (threadIdx.x == 0) {
      losses[i] = loss;
      status[i] = hit ? 1 : 0;
    }
    if (dr) {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        float target;
        if constexpr (kSparse) target = j == label ? 1.0f : 0.0f;
        else target = t[i * C + j];
        dr[j] = softmax_math::xent_grad(a[j], mx, lse, softmax_math::smooth(target, ls, C), grad_scale * w);
      }
    }
  }
}


// ---------------------------------------------------------------------------------------------
// Host side

class CudaSoftmax final : public SoftmaxKernel {
 public:
  CudaSoftmax(OpContext& ctx, const SoftmaxParams& p) : SoftmaxKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(int64_t rows, int64_t C, const Tensor& x, Tensor& y) override {
    if (rows == 0 || C == 0) return;
    TRAINER_LAUNCH(softmax_fwd_kernel, row_grid(rows), cuda::row_block(C), c_.stream(), x.f32(), y.f32(), rows, C);
  }

  void backward_impl(int64_t rows, int64_t C, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    if (rows == 0 || C == 0) return;
    TRAINER_LAUNCH(softmax_bwd_kernel, row_grid(rows), cuda::row_block(C), c_.stream(), y.f32(), dy.f32(), dx.f32(),
                   rows, C);
  }

  // Synchronises the stream: the loss and hit count are summed on the GPU and copied back (a few
  // bytes) before returning, and an out-of-range label found on the GPU is reported from here.
  LossStats cross_entropy_impl(int64_t N, int64_t C, bool sparse, const Tensor& logits, const Tensor& labels,
                               Tensor& dlogits, float grad_scale) override {
    if (N == 0) return {0.0, 0, 0};
    const cuda::LossScratch sc = cuda::loss_scratch(scratch_, c_, N);
    double* losses = sc.losses;
    int32_t* status = sc.status;
    LossSums* res = sc.sums;
    rows(N, C, sparse, logits, labels, dlogits, grad_scale, nullptr, losses, status);
    cuda::launch_loss_sums(c_.stream(), losses, status, sparse ? labels.i32() : nullptr, N, res, true);
    LossSums host;
    c_.copy_to_host(&host, res, sizeof host);  // synchronises
    if (host.bad_sample >= 0)
      throw std::out_of_range(cuda::cat("cross_entropy: label ", host.bad_label, " (sample ", host.bad_sample,
                                        ") is outside the ", C, " classes [0, ", C, ")"));
    return {host.loss_sum, int64_t(host.correct), int64_t(host.count)};
  }


  // The per-sample losses and statuses (and dlogits), the scale given or read from `step`.
  void rows(int64_t N, int64_t C, bool sparse, const Tensor& logits, const Tensor& labels, Tensor& dlogits,
            float grad_scale, const StepScalars* step, double* losses, int32_t* status) {
    float* dp = dlogits.defined() ? dlogits.f32() : nullptr;
    const float* cw = dp ? class_weight_ : nullptr;  // training's loss only
    if (sparse)
      TRAINER_LAUNCH(xent_rows_kernel<true>, row_grid(N), cuda::row_block(C), c_.stream(), logits.f32(), labels.i32(),
                     static_cast<const float*>(nullptr), dp, grad_scale, step, label_smoothing_, ignore_, ignore_class_, cw,
                     N, C, losses, status);
    else
      TRAINER_LAUNCH(xent_rows_kernel<false>, row_grid(N), cuda::row_block(C), c_.stream(), logits.f32(),
                     static_cast<const int32_t*>(nullptr), labels.f32(), dp, grad_scale, step, label_smoothing_, false, 0,
                     cw, N, C, losses, status);
  }

  // A recorded step's: no copy to the host, the statistics added to `sums` on the device.
  void cross_entropy_into_impl(int64_t N, int64_t C, bool sparse, const Tensor& logits, const Tensor& labels,
                               Tensor& dlogits, const StepScalars* step, float scale_mul, LossSums* sums) override {
    if (N == 0) return;
    const cuda::LossScratch sc = cuda::loss_scratch(scratch_, c_, N);
    double* losses = sc.losses;
    int32_t* status = sc.status;
    rows(N, C, sparse, logits, labels, dlogits, scale_mul, step, losses, status);
    cuda::launch_loss_sums(c_.stream(), losses, status, sparse ? labels.i32() : nullptr, N, sums, false);
  }

  // One block per row, at most 2^20 blocks (the kernels loop over further rows).
  static unsigned row_grid(int64_t rows) { return unsigned(rows < (int64_t(1) << 20) ? rows : (int64_t(1) << 20)); }

  CudaContext& c_;
  Scratch scratch_;  // cross_entropy's per-sample losses and statuses, then its result
};

static RegisterKernel<SoftmaxKernel, CudaSoftmax> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
