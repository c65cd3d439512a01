// CUDA global pooling: [N,H,W,C] -> [N,C] average or max of any float type and their gradients (thread per (n, c), the CPU's order).
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/math/pool_math.h"
#include "core/ops/pooling.h"

namespace trainer {
namespace {

// Thread per output (i, c): a sequential pass over the hw positions in the CPU's order and with its
// rules (pool_math.h), so the result is bit-identical to cpu_pooling.cpp. Adjacent threads read
// adjacent channels (coalesced). bf16/f16 values are summed in float and rounded once; the max is exact.
template <class T>
struct Column {  // position s of (sample i, channel c): x[(i·hw + s)·C + c]
  const T* p;
  int64_t C;
  __host__ __device__ float operator()(int64_t s) const { return cuda::to_f32(p[s * C]); }
};

template <class T>
__global__ void global_pool_fwd_kernel(const T* x, T* y, int64_t n, int64_t hw, int64_t C, bool avg, float inv) {
  CUDA_GRID_LOOP(idx, n * C) {
    const int64_t i = idx / C, c = idx - i * C;
    y[idx] = cuda::from_f32<T>(pool_math::global_forward(hw, avg, inv, Column<T>{x + i * hw * C + c, C}));
  }
}

// Average: every position receives dy / hw (thread per dx element).
template <class T>
__global__ void global_avg_bwd_kernel(const T* dy, T* dx, int64_t n, int64_t hw, int64_t C, float inv) {
  CUDA_GRID_LOOP(idx, n * hw * C) {
    const int64_t c = idx % C, i = idx / (hw * C);
    dx[idx] = cuda::from_f32<T>(cuda::to_f32(dy[i * C + c]) * inv);
  }
}

// Max: the gradient goes to the first position holding the maximum (as TF's argmax and the CPU);
// thread per (i, c) writes its whole column of dx, zeros elsewhere.
template <class T>
__global__ void global_max_bwd_kernel(const T* x, const T* y, const T* dy, T* dx, int64_t n, int64_t hw, int64_t C) {
  CUDA_GRID_LOOP(idx, n * C) {
    const int64_t i = idx / C, c = idx - i * C;
    const int64_t at = pool_math::global_argmax(hw, cuda::to_f32(y[idx]), Column<T>{x + i * hw * C + c, C});
    T* d = dx + i * hw * C + c;
    const T g = dy[idx], zero = cuda::from_f32<T>(0.0f);
    for (int64_t s = 0; s < hw; ++s) d[s * C] = s == at ? g : zero;
  }
}

class CudaGlobalPool final : public GlobalPoolKernel {
 public:
  CudaGlobalPool(OpContext& ctx, const GlobalPoolParams& p) : GlobalPoolKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const Tensor& x, Tensor& y) override {
    const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), C = x.dim(3);
    if (hw == 0) {
      c_.fill_zero(y.data(), y.bytes());
      return;
    }
    const bool avg = p_.kind == PoolKind::Avg;
    const float inv = pool_math::global_inv(hw);
    cuda::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      TRAINER_LAUNCH(global_pool_fwd_kernel<T>, cuda::grid_for(n * C, c_), cuda::kBlock, c_.stream(),
                     cuda::ptr<const T>(x), cuda::ptr<T>(y), n, hw, C, avg, inv);
    });
  }

  void backward_impl(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), C = x.dim(3);
    const bool avg = p_.kind == PoolKind::Avg;
    if (hw == 0) return;
    const float inv = pool_math::global_inv(hw);
    cuda::dispatch_float(kName, "x", x, [&](auto tag) {
      using T = decltype(tag);
      if (avg)
        TRAINER_LAUNCH(global_avg_bwd_kernel<T>, cuda::grid_for(n * hw * C, c_), cuda::kBlock, c_.stream(),
                       cuda::ptr<const T>(dy), cuda::ptr<T>(dx), n, hw, C, inv);
      else
        TRAINER_LAUNCH(global_max_bwd_kernel<T>, cuda::grid_for(n * C, c_), cuda::kBlock, c_.stream(),
                       cuda::ptr<const T>(x), cuda::ptr<const T>(y), cuda::ptr<const T>(dy), cuda::ptr<T>(dx), n, hw,
                       C);
    });
  }

  CudaContext& c_;
};

static RegisterKernel<GlobalPoolKernel, CudaGlobalPool> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
