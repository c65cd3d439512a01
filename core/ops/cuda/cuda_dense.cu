// CUDA dense: y = x·w + b over the last axis through cuBLAS sgemm (row-major via column-major operands), db by gemv.
#include <climits>
#include <utility>
#include <vector>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/dense.h"

namespace trainer {
namespace {

constexpr const char* kOp = "dense";

// Row-major matrices seen by column-major cuBLAS: a row-major [R, C] buffer is the column-major
// C x R matrix with leading dimension C, i.e. its transpose. So with x [N, K], w [K, U], dy [N, U]:
//   y  = x·w     <=>  yᵀ (U x N) = wᵀ (U x K) · xᵀ (K x N)   sgemm(N, N, m=U, n=N, k=K, w, U, x, K, y, U)
//   dx = dy·wᵀ   <=>  dxᵀ (K x N) = w (K x U) · dyᵀ (U x N)  sgemm(T, N, m=K, n=N, k=U, w, U, dy, U, dx, K)
//   dw = xᵀ·dy   <=>  dwᵀ (U x K) = dyᵀ (U x N) · x (N x K)  sgemm(N, T, m=U, n=K, k=N, dy, U, x, K, dw, U)
//   db = Σ_rows dy <=> db (U) = dyᵀ (U x N) · 1 (N)          sgemv(N, m=U, n=N, dy, U, ones, db)
// cuBLAS routines are deterministic run to run on one stream (cuBLAS guide, "Results
// reproducibility"); the handle is bound to the context's stream in CUDA's default math mode, so
// sgemm is true fp32 (no TF32). Precision hook: bf16/fp16 would go through cublasGemmEx /
// cublasLt with CUBLAS_COMPUTE_32F and fp32 accumulation.

__global__ void fill_kernel(float* __restrict__ p, int64_t n, float v) { CUDA_GRID_LOOP(i, n) p[i] = v; }

// y[r, j] = b[j] for every row r of y [rows, u].
__global__ void broadcast_rows_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t rows, int64_t u) {
  CUDA_GRID_LOOP(i, rows * u) y[i] = b[i % u];
}

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) cuda::fail(kOp, ": ", what, " = ", v, " exceeds cuBLAS's 32-bit dimensions");
  return int(v);
}

class CudaDense final : public DenseKernel {
 public:
  CudaDense(OpContext& ctx, const DenseParams& p) : c_(cuda_context(ctx)), p_(p) {
    if (p.units <= 0) cuda::fail(kOp, ": units must be positive, got ", p.units);
    cublasPointerMode_t mode;
    CUBLAS_CHECK(cublasGetPointerMode(c_.cublas(), &mode));
    if (mode != CUBLAS_POINTER_MODE_HOST)  // alpha/beta below are host scalars
      throw DeviceError("dense: the cuBLAS handle of " + c_.device().str() + " is not in host pointer mode");
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    auto [n, k] = check(x, w);
    const int64_t u = p_.units;
    if (p_.bias) cuda::require_shape(kOp, "b", b, {u}, dev());
    cuda::require_shape(kOp, "y", y, out_shape(x), dev());
    if (n == 0) return;  // also K == 0 (no rows as the CPU backend counts them): y is left as is
    float* yp = y.f32();
    if (p_.bias)
      TRAINER_LAUNCH(broadcast_rows_kernel, cuda::grid_for(n * u, c_), cuda::kBlock, c_.stream(), yp, b.f32(), n, u);
    const float one = 1.0f, beta = p_.bias ? 1.0f : 0.0f;  // beta 0: y is not read (may hold NaN)
    CUBLAS_CHECK(cublasSgemm(c_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, to_int(u, "units"), to_int(n, "rows"),
                             to_int(k, "inputs"), &one, w.f32(), int(u), x.f32(), int(k), &beta, yp, int(u)));
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) override {
    auto [n, k] = check(x, w);
    const int64_t u = p_.units;
    cuda::require_shape(kOp, "dy", dy, out_shape(x), dev());
    cuda::require_shape(kOp, "dw", dw, {k, u}, dev());
    if (p_.bias) cuda::require_shape(kOp, "db", db, {u}, dev());
    if (dx.defined()) cuda::require_shape(kOp, "dx", dx, x.shape(), dev());
    if (n == 0) {  // no rows (an empty batch, or K == 0 as the CPU backend counts rows): zero gradients
      c_.fill_zero(dw.data(), dw.bytes());
      if (p_.bias) c_.fill_zero(db.data(), db.bytes());
      return;
    }
    const int N = to_int(n, "rows"), K = to_int(k, "inputs"), U = to_int(u, "units");
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h = c_.cublas();
    if (dx.defined())
      CUBLAS_CHECK(
          cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, K, N, U, &one, w.f32(), U, dy.f32(), U, &zero, dx.f32(), K));
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, U, K, N, &one, dy.f32(), U, x.f32(), K, &zero, dw.f32(), U));
    if (p_.bias) CUBLAS_CHECK(cublasSgemv(h, CUBLAS_OP_N, U, N, &one, dy.f32(), U, ones(n), 1, &zero, db.f32(), 1));
  }

 private:
  Device dev() const { return c_.device(); }

  // {rows, K}: rows = numel / K (0 when K == 0, as the CPU backend counts them).
  std::pair<int64_t, int64_t> check(const Tensor& x, const Tensor& w) const {
    cuda::require_f32(kOp, "x", x, dev());
    shape_checks::require_min_rank(kOp, "x", x, 2);
    auto [rows, k] = shape_checks::rows_by_last(x);
    cuda::require_shape(kOp, "w", w, {k, p_.units}, dev());
    return {rows, k};
  }

  // x [..., K] -> [..., units] (Keras applies Dense to the last axis).
  Shape out_shape(const Tensor& x) const {
    std::vector<int64_t> d = x.shape().dims();
    d.back() = p_.units;
    return Shape(std::move(d));
  }

  // A device vector of at least n ones (grown on demand; the old block goes back to the
  // stream-ordered allocator, so work still reading it is unaffected).
  const float* ones(int64_t n) {
    if (ones_.numel() < n) {
      ones_ = c_.empty({n});
      TRAINER_LAUNCH(fill_kernel, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), ones_.f32(), n, 1.0f);
    }
    return ones_.f32();
  }

  CudaContext& c_;
  DenseParams p_;
  Tensor ones_;
};

static RegisterKernel<DenseKernel, CudaDense> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
