// CUDA group norm: one block per (sample, group) row (block reductions in double, layernorm_math.h's arithmetic), gamma's and beta's gradients through the deterministic column reduction.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_reduce.cuh"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/group_norm.h"

namespace trainer {
namespace {

using cuda::block_sum;
using ln::RowStats;

// Group (n, g)'s statistics (two passes in double over x - shift); every thread of the block gets them.
__device__ __forceinline__ RowStats group_stats(const gn::Shape3& s, const float* x, int64_t n, int64_t g, float eps) {
  const int64_t M = s.group_size();
  if (M == 0) return {0.0f, 0.0f, ln::rstd_of(0.0, 1, eps)};
  const float shift = x[s.at(n, g, 0)];
  double sum = 0.0;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) sum += double(x[s.at(n, g, m)] - shift);
  const float mean = float(block_sum(sum) / double(M));
  double q = 0.0;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
    const double d = double((x[s.at(n, g, m)] - shift) - mean);
    q += d * d;
  }
  return {shift, mean, ln::rstd_of(block_sum(q), M, eps)};
}

// y and each group's statistics (gamma / beta null: 1 / 0). Block b handles rows b, b + gridDim.x, ...
__global__ void group_norm_fwd_kernel(gn::Shape3 s, const float* x, const float* gamma, const float* beta, float* y,
                                      RowStats* stats, float eps) {
  const int64_t cg = s.per_group(), M = s.group_size();
  for (int64_t r = blockIdx.x; r < s.N * s.G; r += gridDim.x) {
    const int64_t n = r / s.G, g = r % s.G;
    const RowStats st = group_stats(s, x, n, g, eps);
    if (threadIdx.x == 0) stats[r] = st;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
      const int64_t o = s.at(n, g, m), c = g * cg + m % cg;
      y[o] = ln::forward(x[o], st, gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f);
    }
  }
}

__global__ void group_norm_dx_kernel(gn::Shape3 s, const float* x, const float* gamma, const float* dy,
                                     const RowStats* stats, float* dx) {
  const int64_t cg = s.per_group(), M = s.group_size();
  for (int64_t r = blockIdx.x; r < s.N * s.G; r += gridDim.x) {
    const int64_t n = r / s.G, g = r % s.G;
    const RowStats st = stats[r];
    double sg = 0.0, sgx = 0.0;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
      const int64_t o = s.at(n, g, m), c = g * cg + m % cg;
      const float gv = dy[o] * (gamma ? gamma[c] : 1.0f);
      sg += double(gv);
      sgx += double(gv) * double(ln::normalise(x[o], st));
    }
    const float mg = float(block_sum(sg) / double(M)), mgx = float(block_sum(sgx) / double(M));
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
      const int64_t o = s.at(n, g, m), c = g * cg + m % cg;
      dx[o] = ln::input_grad(dy[o] * (gamma ? gamma[c] : 1.0f), ln::normalise(x[o], st), mg, mgx, st.rstd);
    }
  }
}

// Σ dy·x̂ and Σ dy per channel over the rows (sample, position) of [N·P, C] (column_reduce.h's order).
struct ParamTerms {
  gn::Shape3 s;
  const float* x;
  const float* dy;
  const RowStats* stats;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, double (&a)[2]) const {
    const int64_t o = r * s.C + c;
    const float g = dy[o];
    a[0] = fma(double(g), double(ln::normalise(x[o], stats[s.row_of(o)])), a[0]);
    a[1] += double(g);
  }
};

struct StoreParams {
  float* dgamma;
  float* dbeta;
  __device__ __forceinline__ void operator()(int64_t c, const double (&v)[2]) const {
    if (dgamma) dgamma[c] = float(v[0]);
    if (dbeta) dbeta[c] = float(v[1]);
  }
};

class CudaGroupNorm final : public GroupNormKernel {
 public:
  CudaGroupNorm(OpContext& ctx, const GroupNormParams& p) : GroupNormKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const gn::Shape3& s, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                    Tensor& stats) override {
    if (s.N * s.G == 0) return;
    TRAINER_LAUNCH(group_norm_fwd_kernel, row_grid(s.N * s.G), cuda::row_block(s.group_size()), c_.stream(), s, x.f32(),
                   gamma.defined() ? gamma.f32() : nullptr, beta.defined() ? beta.f32() : nullptr, y.f32(),
                   static_cast<RowStats*>(stats.data()), p_.epsilon);
  }

  void backward_impl(const gn::Shape3& s, const Tensor& x, const Tensor& gamma, const Tensor& dy, const Tensor& stats,
                     Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    const auto* st = static_cast<const RowStats*>(stats.data());
    if (dx.defined() && s.N * s.G > 0)
      TRAINER_LAUNCH(group_norm_dx_kernel, row_grid(s.N * s.G), cuda::row_block(s.group_size()), c_.stream(), s, x.f32(),
                     gamma.defined() ? gamma.f32() : nullptr, dy.f32(), st, dx.f32());
    if (dgamma.defined() || dbeta.defined())
      sums_.run<2>(c_, s.N * s.P, s.C, ParamTerms{s, x.f32(), dy.f32(), st},
                   StoreParams{dgamma.defined() ? dgamma.f32() : nullptr, dbeta.defined() ? dbeta.f32() : nullptr});
  }

  // One block per row, at most 2^20 blocks (the kernels loop over further rows).
  static unsigned row_grid(int64_t rows) { return unsigned(rows < (int64_t(1) << 20) ? rows : (int64_t(1) << 20)); }

  CudaContext& c_;
  cuda::ColumnReducer sums_;  // dgamma, dbeta
};

static RegisterKernel<GroupNormKernel, CudaGroupNorm> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
