// CUDA global pooling: [N,H,W,C] -> [N,C] average or max and their gradients (thread per (n, c), same order of operations as the CPU).
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/pooling.h"

namespace trainer {
namespace {

// Thread per output (i, c): a sequential pass over the hw positions in the CPU's order, so the
// result is bit-identical to cpu_pooling.cpp. Adjacent threads read adjacent channels (coalesced).
__global__ void global_pool_fwd_kernel(const float* x, float* y, int64_t n, int64_t hw, int64_t C, bool avg,
                                       float inv) {
  CUDA_GRID_LOOP(idx, n * C) {
    const int64_t i = idx / C, c = idx - i * C;
    const float* src = x + i * hw * C + c;
    float o;
    if (avg) {
      o = 0.0f;
      for (int64_t s = 0; s < hw; ++s) o += src[s * C];
      o *= inv;
    } else {
      o = -INFINITY;
      for (int64_t s = 0; s < hw; ++s) {
        const float r = src[s * C];
        o = r > o ? r : o;
      }
    }
    y[idx] = o;
  }
}

// Average: every position receives dy / hw (thread per dx element).
__global__ void global_avg_bwd_kernel(const float* dy, float* dx, int64_t n, int64_t hw, int64_t C, float inv) {
  CUDA_GRID_LOOP(idx, n * hw * C) {
    const int64_t c = idx % C, i = idx / (hw * C);
    dx[idx] = dy[i * C + c] * inv;
  }
}

// Max: the gradient goes to the first position holding the maximum (as TF's argmax and the CPU);
// thread per (i, c) writes its whole column of dx, zeros elsewhere.
__global__ void global_max_bwd_kernel(const float* x, const float* y, const float* dy, float* dx, int64_t n,
                                      int64_t hw, int64_t C) {
  CUDA_GRID_LOOP(idx, n * C) {
    const int64_t i = idx / C, c = idx - i * C;
    const float* src = x + i * hw * C + c;
    float* d = dx + i * hw * C + c;
    const float m = y[idx], g = dy[idx];
    bool found = false;
    for (int64_t s = 0; s < hw; ++s) {
      const bool here = !found && src[s * C] == m;
      d[s * C] = here ? g : 0.0f;
      found = found || here;
    }
  }
}

class CudaGlobalPool final : public GlobalPoolKernel {
 public:
  CudaGlobalPool(OpContext& ctx, const GlobalPoolParams& p) : c_(cuda_context(ctx)), p_(p) {}

  void forward(const Tensor& x, Tensor& y) override {
    const Device dev = c_.device();
    cuda::require_rank("global_pool", "x", x, 4, dev);
    const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), C = x.dim(3);
    cuda::require_shape("global_pool", "y", y, {n, C}, dev);
    if (hw == 0) {
      c_.fill_zero(y.data(), y.bytes());
      return;
    }
    const bool avg = p_.kind == PoolKind::Avg;
    const float inv = 1.0f / float(hw);
    TRAINER_LAUNCH(global_pool_fwd_kernel, cuda::grid_for(n * C, c_), cuda::kBlock, c_.stream(), x.f32(), y.f32(), n,
                   hw, C, avg, inv);
  }

  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    const Device dev = c_.device();
    cuda::require_rank("global_pool", "x", x, 4, dev);
    const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), C = x.dim(3);
    cuda::require_shape("global_pool", "dy", dy, {n, C}, dev);
    cuda::require_shape("global_pool", "dx", dx, x.shape(), dev);
    const bool avg = p_.kind == PoolKind::Avg;
    if (!avg) cuda::require_shape("global_pool", "y", y, {n, C}, dev);
    if (hw == 0) return;
    const float inv = 1.0f / float(hw);
    if (avg)
      TRAINER_LAUNCH(global_avg_bwd_kernel, cuda::grid_for(n * hw * C, c_), cuda::kBlock, c_.stream(), dy.f32(),
                     dx.f32(), n, hw, C, inv);
    else
      TRAINER_LAUNCH(global_max_bwd_kernel, cuda::grid_for(n * C, c_), cuda::kBlock, c_.stream(), x.f32(), y.f32(),
                     dy.f32(), dx.f32(), n, hw, C);
  }

 private:
  CudaContext& c_;
  GlobalPoolParams p_;
};

static RegisterKernel<GlobalPoolKernel, CudaGlobalPool> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
