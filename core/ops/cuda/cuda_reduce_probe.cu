// Test hook: the GPU's column reducer run on host data with the bias-gradient and batch-norm terms, its sums returned as doubles.
#include "core/ops/math/batchnorm_math.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_reduce.cuh"
#include "core/ops/cuda/cuda_reduce_probe.h"

namespace trainer::cuda {
namespace {

// The batch-norm forward's terms: bn::centred_terms of x - x[0, c] (cuda_batchnorm.cu's CentredTerms
// with first_row).
struct FirstRowCentred {
  const float* x;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, double (&a)[2]) const { bn::centred_terms(x[r * C + c], x[c], a); }
};

template <int K>
struct StoreF64 {
  double* out;
  __device__ void operator()(int64_t c, const double (&s)[K]) const {
    for (int k = 0; k < K; ++k) out[c * K + k] = s[k];
  }
};

}  // namespace

std::vector<double> column_reduce_on_gpu(OpContext& ctx, const std::vector<float>& x, int64_t m, int64_t C, int K) {
  CudaContext& c = cuda_context(ctx);
  if (K != 1 && K != 2) fail("column_reduce_on_gpu: K must be 1 or 2, got ", K);
  if (int64_t(x.size()) != m * C) fail("column_reduce_on_gpu: ", x.size(), " values for [", m, ", ", C, "]");
  std::vector<double> out(size_t(C * K));
  if (C == 0) return out;
  Tensor xd = c.empty({std::max<int64_t>(m * C, 1)});
  if (m * C > 0) c.copy_from_host(xd.data(), x.data(), x.size() * sizeof(float));
  Tensor od = c.empty({C * K * int64_t(sizeof(double))}, DType::U8);
  double* o = static_cast<double*>(od.data());
  ColumnReducer r;
  if (K == 1) r.run<1>(c, m, C, ColumnSumTerm<float>{xd.f32(), C}, StoreF64<1>{o});
  else r.run<2>(c, m, C, FirstRowCentred{xd.f32(), C}, StoreF64<2>{o});
  c.copy_to_host(out.data(), o, out.size() * sizeof(double));  // synchronises
  return out;
}

}  // namespace trainer::cuda
