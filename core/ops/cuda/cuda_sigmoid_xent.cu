// CUDA sigmoid cross-entropy: per-sample loss, hit and gradient (one thread each), then a one-block fixed-order sum.
#include <climits>
#include <stdexcept>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/sigmoid_xent.h"

namespace trainer {
namespace {

// status[i]: 1 hit, 0 miss, -1 label neither 0 nor 1 (no loss; d[i] = 0). `step` (device
// memory, may be null): the scale is step->loss_scale instead, read here.
__global__ void bce_samples_kernel(const float* __restrict__ x, const int32_t* __restrict__ z, float* __restrict__ d,
                                   float scale0, const StepScalars* step, int64_t N, double* __restrict__ losses,
                                   int32_t* __restrict__ status) {
  const float scale = step ? step->loss_scale : scale0;
  CUDA_GRID_LOOP(i, N) {
    const int32_t lab = z[i];
    if (lab != 0 && lab != 1) {
      losses[i] = 0.0;
      status[i] = -1;
      if (d) d[i] = 0.0f;
      continue;
    }
    losses[i] = sigmoid_xent::loss(x[i], lab);
    status[i] = sigmoid_xent::hit(x[i], lab) ? 1 : 0;
    if (d) d[i] = sigmoid_xent::grad(x[i], lab, scale);
  }
}

struct BceResult {
  double loss_sum;
  long long correct;
  long long bad_sample;  // the first sample with a label other than 0/1, or -1
};

// One block: thread t sums samples t, t + blockDim.x, ... in order, then the block reduction's
// fixed tree: bit-reproducible for a given N.
__global__ void bce_finalize_kernel(const double* losses, const int32_t* status, int64_t N, BceResult* out) {
  double s = 0.0;
  long long hits = 0, bad = LLONG_MAX;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    s += losses[i];
    hits += status[i] > 0;
    if (status[i] < 0 && i < bad) bad = i;
  }
  s = cuda::block_sum(s);
  hits = cuda::block_sum(hits);
  bad = cuda::block_min(bad);
  if (threadIdx.x == 0) *out = {s, hits, bad == LLONG_MAX ? -1 : bad};
}

// The sums added to a step's LossSums (a recorded step), the first bad sample noted once.
__global__ void bce_accumulate_kernel(const double* losses, const int32_t* status, const int32_t* labels, int64_t N,
                                      LossSums* sums) {
  double s = 0.0;
  long long hits = 0, bad = LLONG_MAX;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    s += losses[i];
    hits += status[i] > 0;
    if (status[i] < 0 && i < bad) bad = i;
  }
  s = cuda::block_sum(s);
  hits = cuda::block_sum(hits);
  bad = cuda::block_min(bad);
  if (threadIdx.x == 0) {
    sums->loss_sum += s;
    sums->correct += hits;
    sums->count += N;
    if (bad != LLONG_MAX && sums->bad_sample < 0) {
      sums->bad_sample = bad;
      sums->bad_label = labels[bad];
    }
  }
}

class CudaSigmoidXent final : public SigmoidXentKernel {
 public:
  CudaSigmoidXent(OpContext& ctx, const SigmoidXentParams& p) : SigmoidXentKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  // Synchronises the stream (the sums are copied back), and reports a bad label from here.
  LossStats loss_impl(int64_t N, const Tensor& logits, const Tensor& labels, Tensor& dlogits,
                      float grad_scale) override {
    const bool grad = dlogits.defined();
    if (N == 0) return {0.0, 0, 0};

    const size_t loss_bytes = size_t(N) * sizeof(double), status_bytes = size_t(N) * sizeof(int32_t);
    const size_t res_off = (loss_bytes + status_bytes + 15) & ~size_t(15);
    char* buf = static_cast<char*>(scratch_.get(c_, res_off + sizeof(BceResult)));
    double* losses = reinterpret_cast<double*>(buf);
    int32_t* status = reinterpret_cast<int32_t*>(buf + loss_bytes);
    BceResult* res = reinterpret_cast<BceResult*>(buf + res_off);
    TRAINER_LAUNCH(bce_samples_kernel, cuda::grid_for(N, c_), cuda::kBlock, c_.stream(), logits.f32(), labels.i32(),
                   grad ? dlogits.f32() : nullptr, grad_scale, static_cast<const StepScalars*>(nullptr), N, losses, status);
    TRAINER_LAUNCH(bce_finalize_kernel, 1u, 256u, c_.stream(), losses, status, N, res);
    BceResult host{};
    c_.copy_to_host(&host, res, sizeof host);  // synchronises
    if (host.bad_sample >= 0) {
      int32_t bad = 0;
      c_.copy_to_host(&bad, labels.i32() + host.bad_sample, sizeof bad);
      throw std::out_of_range(cuda::cat("sigmoid_xent: label ", bad, " (sample ", host.bad_sample, ") is not 0 or 1"));
    }
    return {host.loss_sum, int64_t(host.correct), N};
  }

  // A recorded step's: no copy to the host, the statistics added to `sums` on the device.
  void loss_into_impl(int64_t N, const Tensor& logits, const Tensor& labels, Tensor& dlogits, const StepScalars* step,
                      LossSums* sums) override {
    if (N == 0) return;
    const size_t loss_bytes = size_t(N) * sizeof(double), status_bytes = size_t(N) * sizeof(int32_t);
    char* buf = static_cast<char*>(scratch_.get(c_, loss_bytes + status_bytes));
    double* losses = reinterpret_cast<double*>(buf);
    int32_t* status = reinterpret_cast<int32_t*>(buf + loss_bytes);
    TRAINER_LAUNCH(bce_samples_kernel, cuda::grid_for(N, c_), cuda::kBlock, c_.stream(), logits.f32(), labels.i32(),
                   dlogits.defined() ? dlogits.f32() : nullptr, 1.0f, step, N, losses, status);
    TRAINER_LAUNCH(bce_accumulate_kernel, 1u, 256u, c_.stream(), losses, status, labels.i32(), N, sums);
  }

  CudaContext& c_;
  Scratch scratch_;  // per-sample losses and statuses, then the result
};

static RegisterKernel<SigmoidXentKernel, CudaSigmoidXent> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
