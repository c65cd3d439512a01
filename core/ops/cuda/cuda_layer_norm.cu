// CUDA layer norm: one block per row (block reductions in double), the parameter gradients through the deterministic column reduction.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_reduce.cuh"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/layer_norm.h"
#include "core/ops/math/layernorm_math.h"

namespace trainer {
namespace {

using cuda::block_sum;
using ln::RowStats;

// A row's mean and rstd as layernorm_math.h says (two passes, sums in double); every thread of the
// block gets them. Block b handles rows b, b + gridDim.x, ...; every thread runs every iteration.
__device__ __forceinline__ RowStats row_stats(const float* xr, int64_t C, float eps) {
  const float shift = xr[0];
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) s += double(xr[j] - shift);
  const float mean = float(block_sum(s) / double(C));
  double q = 0.0;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
    const double d = double((xr[j] - shift) - mean);
    q += d * d;
  }
  return {shift, mean, ln::rstd_of(block_sum(q), C, eps)};
}

// gamma / beta null: 1 / 0.
__global__ void layer_norm_fwd_kernel(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                                      int64_t C, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * C;
    const RowStats st = row_stats(xr, C, eps);
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
      y[r * C + j] = ln::forward(xr[j], st, gamma ? gamma[j] : 1.0f, beta ? beta[j] : 0.0f);
  }
}

// dx (when not null) and each row's statistics into stats (when not null) for the parameter sums.
__global__ void layer_norm_bwd_kernel(const float* x, const float* gamma, const float* dy, float* dx, RowStats* stats,
                                      int64_t rows, int64_t C, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * C;
    const float* gr = dy + r * C;
    const RowStats st = row_stats(xr, C, eps);
    if (stats && threadIdx.x == 0) stats[r] = st;
    if (!dx) continue;
    double sg = 0.0, sgx = 0.0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      const float g = gr[j] * (gamma ? gamma[j] : 1.0f);
      sg += double(g);
      sgx += double(g) * double(ln::normalise(xr[j], st));
    }
    const float mg = float(block_sum(sg) / double(C)), mgx = float(block_sum(sgx) / double(C));
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
      dx[r * C + j] = ln::input_grad(gr[j] * (gamma ? gamma[j] : 1.0f), ln::normalise(xr[j], st), mg, mgx, st.rstd);
  }
}

// Σ dy·x̂ and Σ dy per column (column_reduce.h's order).
struct ParamTerms {
  const float* x;
  const float* dy;
  const RowStats* stats;
  int64_t C;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, double (&a)[2]) const {
    const float g = dy[r * C + c];
    a[0] = fma(double(g), double(ln::normalise(x[r * C + c], stats[r])), a[0]);
    a[1] += double(g);
  }
};

struct StoreParams {
  float* dgamma;
  float* dbeta;
  __device__ __forceinline__ void operator()(int64_t c, const double (&s)[2]) const {
    if (dgamma) dgamma[c] = float(s[0]);
    if (dbeta) dbeta[c] = float(s[1]);
  }
};

class CudaLayerNorm final : public LayerNormKernel {
 public:
  CudaLayerNorm(OpContext& ctx, const LayerNormParams& p) : LayerNormKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(int64_t rows, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y) override {
    if (rows == 0) return;
    TRAINER_LAUNCH(layer_norm_fwd_kernel, row_grid(rows), cuda::row_block(p_.features), c_.stream(), x.f32(),
                   gamma.defined() ? gamma.f32() : nullptr, beta.defined() ? beta.f32() : nullptr, y.f32(), rows,
                   p_.features, p_.epsilon);
  }

  void backward_impl(int64_t rows, const Tensor& x, const Tensor& gamma, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                     Tensor& dbeta) override {
    const int64_t C = p_.features;
    const bool params = dgamma.defined() || dbeta.defined();
    RowStats* stats = params ? stats_.as<RowStats>(c_, size_t(rows > 0 ? rows : 1)) : nullptr;
    if (rows > 0 && (params || dx.defined()))
      TRAINER_LAUNCH(layer_norm_bwd_kernel, row_grid(rows), cuda::row_block(C), c_.stream(), x.f32(),
                     gamma.defined() ? gamma.f32() : nullptr, dy.f32(), dx.defined() ? dx.f32() : nullptr, stats, rows,
                     C, p_.epsilon);
    if (params)
      sums_.run<2>(c_, rows, C, ParamTerms{x.f32(), dy.f32(), stats, C},
                   StoreParams{dgamma.defined() ? dgamma.f32() : nullptr, dbeta.defined() ? dbeta.f32() : nullptr});
  }

  // One block per row, at most 2^20 blocks (the kernels loop over further rows).
  static unsigned row_grid(int64_t rows) { return unsigned(rows < (int64_t(1) << 20) ? rows : (int64_t(1) << 20)); }

  CudaContext& c_;
  Scratch stats_;            // backward's per-row statistics
  cuda::ColumnReducer sums_;  // dgamma, dbeta
};

static RegisterKernel<LayerNormKernel, CudaLayerNorm> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
