// CUDA simple_rnn: Keras SimpleRNN forward and backpropagation through time with cuBLAS sgemm and a fused activation kernel (cpu_simple_rnn.cpp's algorithm).
#include <climits>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_reduce.cuh"
#include "core/ops/simple_rnn.h"

// cpu_simple_rnn.cpp's algorithm with cuda_gru.cu's conventions:
//   forward   A = x·W for all N·T rows in one sgemm; per step A_t += h_{t-1}·R (none at t = 0) and
//             one kernel of bias + activation over [N, U], A_t becoming h_t;
//   backward  per step dh = dA_{t+1}·Rᵀ and one kernel dA_t = (dh + dy_t)·act'(h_t); then one sgemm
//             each for dx, dW, dR; db the column sums of dA (fixed order).
// Row-major matrices through column-major cuBLAS: see cuda_dense.cu.

namespace trainer {
namespace {

constexpr const char* kOp = "simple_rnn";

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) cuda::fail(kOp, ": ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
  return int(v);
}

// Step t of forward, one thread per (n, j) of [N, U]: a's row n·T + t holds the pre-activation
// (without bias) and gets h_t; hp's row n·T + t + 1 gets h_t; y gets h_t (every step, or the last).
__global__ void rnn_forward_kernel(float* __restrict__ a, float* __restrict__ hp, float* __restrict__ y,
                                   const float* __restrict__ b, int64_t N, int64_t T, int64_t U, int64_t t, bool seq,
                                   simple_rnn_math::Act act) {
  CUDA_GRID_LOOP(e, N * U) {
    const int64_t n = e / U, j = e % U, row = n * T + t;
    const float h = simple_rnn_math::activate(act, a[row * U + j] + (b ? b[j] : 0.0f));
    a[row * U + j] = h;
    if (t + 1 < T) hp[(row + 1) * U + j] = h;
    if (seq) y[row * U + j] = h;
    else if (t + 1 == T) y[n * U + j] = h;
  }
}

// Step t of backward, one thread per (n, j): dA_t = (dh from step t + 1 + the output's gradient)·act'(h_t).
__global__ void rnn_backward_kernel(const float* __restrict__ hs, const float* __restrict__ dy,
                                    const float* __restrict__ dh, float* __restrict__ da, int64_t N, int64_t T,
                                    int64_t U, int64_t t, bool seq, simple_rnn_math::Act act) {
  CUDA_GRID_LOOP(e, N * U) {
    const int64_t n = e / U, j = e % U, row = n * T + t;
    const bool last = t + 1 == T;
    const float g_out = seq ? dy[row * U + j] : (last ? dy[n * U + j] : 0.0f);
    da[row * U + j] = simple_rnn_math::pre_grad(act, hs[row * U + j], (last ? 0.0f : dh[n * U + j]) + g_out);
  }
}

class CudaSimpleRnn final : public SimpleRnnKernel {
 public:
  CudaSimpleRnn(OpContext& ctx, const SimpleRnnParams& p) : SimpleRnnKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const simple_rnn::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b,
                    Tensor& y, bool /*training*/) override {
    if (d.n == 0) return;
    const Buffers B = buffers(d);
    const int U = to_int(d.u, "units"), F = to_int(d.f, "features");
    const int NT = to_int(d.n * d.t, "batch x steps"), N = int(d.n);
    const int64_t T = d.t;
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h = c_.cublas();
    c_.fill_zero(B.hp, size_t(d.n * T * d.u) * sizeof(float));  // h_{-1} = 0 (rows n·T)
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, U, NT, F, &one, w.f32(), U, x.f32(), F, &zero, B.a, U));
    const int ld = to_int(T * U, "steps x units");
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0)  // A_t += h_{t-1}·R
        CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, U, N, U, &one, r.f32(), U, B.hp + t * U, ld, &one,
                                 B.a + t * U, ld));
      TRAINER_LAUNCH(rnn_forward_kernel, cuda::grid_for(d.n * d.u, c_), cuda::kBlock, c_.stream(), B.a, B.hp, y.f32(),
                     p_.bias ? b.f32() : nullptr, d.n, T, d.u, t, p_.return_sequences, p_.activation);
    }
  }

  void backward_impl(const simple_rnn::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& dy,
                     Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) override {
    if (d.n == 0) {
      c_.fill_zero(dw.data(), dw.bytes());
      c_.fill_zero(dr.data(), dr.bytes());
      if (p_.bias) c_.fill_zero(db.data(), db.bytes());
      return;
    }
    const int U = int(d.u), F = int(d.f), NT = int(d.n * d.t), N = int(d.n);
    const int64_t T = d.t;
    const int ld = int(T * U);
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h = c_.cublas();
    const Buffers B = buffers(d);
    for (int64_t t = T - 1; t >= 0; --t) {
      if (t + 1 < T)  // dh = dA_{t+1}·Rᵀ
        CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, U, N, U, &one, r.f32(), U, B.da + (t + 1) * U, ld, &zero,
                                 B.dh, U));
      TRAINER_LAUNCH(rnn_backward_kernel, cuda::grid_for(d.n * d.u, c_), cuda::kBlock, c_.stream(), B.a, dy.f32(), B.dh,
                     B.da, d.n, T, d.u, t, p_.return_sequences, p_.activation);
    }
    if (dx.defined())
      CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, F, NT, U, &one, w.f32(), U, B.da, U, &zero, dx.f32(), F));
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, U, F, NT, &one, B.da, U, x.f32(), F, &zero, dw.f32(), U));
    // h_{-1} = 0 rows add 0
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, U, U, NT, &one, B.da, U, B.hp, U, &zero, dr.f32(), U));
    if (p_.bias) cuda::column_sums(bias_, c_, static_cast<const float*>(B.da), d.n * T, d.u, db.f32());
  }

  // The buffers for N·T rows (Scratch: grown, never shrunk; see cuda_lstm.cu on why not Tensors).
  struct Buffers {
    float *a, *hp, *da, *dh;
  };
  Buffers buffers(const simple_rnn::Dims& d) {
    const size_t rows = size_t(d.n * d.t), u = size_t(d.u);
    return {a_.as<float>(c_, rows * u), hp_.as<float>(c_, rows * u), da_.as<float>(c_, rows * u),
            dh_.as<float>(c_, size_t(d.n) * u)};
  }

  CudaContext& c_;
  // cpu_simple_rnn.cpp's workspace: a_ [N, T, U] pre-activations then h_t; hp_ [N, T, U] h_{t-1};
  // da_ [N, T, U]; dh_ [N, U].
  Scratch a_, hp_, da_, dh_;
  cuda::ColumnReducer bias_;
};

static RegisterKernel<SimpleRnnKernel, CudaSimpleRnn> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
