// CUDA dense: y = x·w + b over the last axis through cuBLAS (sgemm in fp32; bf16/f16 tensor-core GemmEx on f32 or low activations under mixed precision), db by column sums.
#include <climits>
#include <utility>
#include <vector>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/cuda/cuda_reduce.cuh"
#include "core/ops/dense.h"

namespace trainer {
namespace {

constexpr const char* kOp = "dense";

// Row-major matrices seen by column-major cuBLAS: a row-major [R, C] buffer is the column-major
// C x R matrix with leading dimension C, i.e. its transpose. So with x [N, K], w [K, U], dy [N, U]:
//   y  = x·w     <=>  yᵀ (U x N) = wᵀ (U x K) · xᵀ (K x N)   gemm(N, N, m=U, n=N, k=K, w, U, x, K, y, U)
//   dx = dy·wᵀ   <=>  dxᵀ (K x N) = w (K x U) · dyᵀ (U x N)  gemm(T, N, m=K, n=N, k=U, w, U, dy, U, dx, K)
//   dw = xᵀ·dy   <=>  dwᵀ (U x K) = dyᵀ (U x N) · x (N x K)  gemm(N, T, m=U, n=K, k=N, dy, U, x, K, dw, U)
//   db = Σ_rows dy: a deterministic column sum (cuda_reduce.cuh; cublasSgemv against a ones vector
//   refused 1-row shapes with "an unsupported value or parameter" on the first GPU run).
// fp32: cublasSgemm in CUDA's default math mode (true fp32, no TF32). bf16/fp16 contexts, as
// PyTorch's autocast and the CPU backend: the operands are multiplied on tensor cores by
// cublasGemmEx with fp32 accumulation (CUBLAS_COMPUTE_32F); f32 operands (the weights always; x
// and dy where the layer's activations are f32: the logits, a layer kept f32) are rounded to the
// low type into scratch buffers first, low ones (the layer computing in the low type) are read as
// they are, and y and dx are written in the activations' type (dw always f32). The bias goes into
// y before the product (beta = 1): in a low y it is rounded once there. cuBLAS routines are
// deterministic run to run on one stream (cuBLAS guide, "Results reproducibility").

template <class T>
__global__ void broadcast_rows_kernel(T* __restrict__ y, const float* __restrict__ b, int64_t rows, int64_t u) {
  CUDA_GRID_LOOP(i, rows * u) y[i] = cuda::from_f32<T>(b[i % u]);
}

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) cuda::fail(kOp, ": ", what, " = ", v, " exceeds cuBLAS's 32-bit dimensions");
  return int(v);
}

class CudaDense final : public DenseKernel {
 public:
  CudaDense(OpContext& ctx, const DenseParams& p)
      : DenseKernel(ctx, p), c_(cuda_context(ctx)), low_(low_dtype(ctx.precision())) {
    cublasPointerMode_t mode;
    CUBLAS_CHECK(cublasGetPointerMode(c_.cublas(), &mode));
    if (mode != CUBLAS_POINTER_MODE_HOST)  // alpha/beta below are host scalars
      throw DeviceError("dense: the cuBLAS handle of " + c_.device().str() + " is not in host pointer mode");
  }

 private:
  void forward_impl(int64_t n, int64_t k, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const int64_t u = p_.units;
    if (n == 0) return;  // also K == 0 (no rows as the CPU backend counts them): y is left as is
    if (p_.bias)
      cuda::dispatch_float(kOp, "y", y, [&](auto t) {
        using T = decltype(t);
        TRAINER_LAUNCH(broadcast_rows_kernel<T>, cuda::grid_for(n * u, c_), cuda::kBlock, c_.stream(),
                       cuda::ptr<T>(y), b.f32(), n, u);
      });
    const float beta = p_.bias ? 1.0f : 0.0f;  // beta 0: y is not read (may hold NaN)
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, to_int(u, "units"), to_int(n, "rows"), to_int(k, "inputs"), w, int(u), wl_, x,
         int(k), xl_, beta, y, int(u));
  }

  void backward_impl(int64_t n, int64_t k, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db) override {
    const int64_t u = p_.units;
    if (n == 0) {  // no rows (an empty batch, or K == 0 as the CPU backend counts rows): zero gradients
      c_.fill_zero(dw.data(), dw.bytes());
      if (p_.bias) c_.fill_zero(db.data(), db.bytes());
      return;
    }
    const int N = to_int(n, "rows"), K = to_int(k, "inputs"), U = to_int(u, "units");
    if (dx.defined()) gemm(CUBLAS_OP_T, CUBLAS_OP_N, K, N, U, w, U, wl_, dy, U, dyl_, 0.0f, dx, K);
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, U, K, N, dy, U, dyl_, x, K, xl_, 0.0f, dw, U);
    if (p_.bias)
      cuda::dispatch_float(kOp, "dy", dy, [&](auto t) {
        using T = decltype(t);
        cuda::column_sums(bias_sums_, c_, cuda::ptr<T>(dy), n, u, db.f32());
      });
  }

  // C (m x n) = op(A)·op(B) + beta·C (lda/ldb/ldc: the leading dimensions). fp32: sgemm on f32
  // tensors. Low precision: an f32 operand rounded into its LowCopy first (its size from op and
  // ld), a low one read as it is; C of its tensor's type (f32, or the low type).
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const Tensor& a, int lda, cuda::LowCopy& al,
            const Tensor& b, int ldb, cuda::LowCopy& bl, float beta, Tensor& c, int ldc) {
    const float one = 1.0f;
    cublasHandle_t h = c_.cublas();
    if (low_ == DType::F32) {
      CUBLAS_CHECK(cublasSgemm(h, ta, tb, m, n, k, &one, a.f32(), lda, b.f32(), ldb, &beta, c.f32(), ldc));
      return;
    }
    const int64_t na = int64_t(lda) * (ta == CUBLAS_OP_N ? k : m), nb = int64_t(ldb) * (tb == CUBLAS_OP_N ? n : k);
    const cudaDataType_t t = low_ == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const cudaDataType_t tc = c.dtype() == DType::F32 ? CUDA_R_32F : t;
    CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &one, low_operand(a, na, al), t, lda, low_operand(b, nb, bl), t, ldb,
                              &beta, c.data(), tc, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // A low-precision context's operand: a tensor of the low type as it is, an f32 one (n elements
  // read) rounded into `copy`.
  const void* low_operand(const Tensor& t, int64_t n, cuda::LowCopy& copy) {
    if (t.dtype() == low_) return t.data();
    if (low_ == DType::BF16) return copy.of<cuda::bf16>(c_, t.f32(), n);
    return copy.of<cuda::f16>(c_, t.f32(), n);
  }

  CudaContext& c_;
  DType low_;                // F32: plain sgemm; BF16/F16: the tensor cores' operand type
  cuda::LowCopy xl_, wl_, dyl_;    // the low-precision operands
  cuda::ColumnReducer bias_sums_;
};

static RegisterKernel<DenseKernel, CudaDense> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
