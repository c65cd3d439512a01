// CUDA lstm: Keras LSTM forward and backpropagation through time with cuBLAS sgemm and fused gate kernels (the CPU kernel's algorithm).
#include <climits>
#include <cmath>
#include <stdexcept>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_reduce.cuh"
#include "core/ops/lstm.h"
#include "core/ops/math/lstm_math.h"

// Why not cuDNN's RNN API (the first version of this file): on the first GPU run it made an
// illegal memory access at n = t = f = u = 1, and a second backward after one forward gave other
// weight gradients (max difference 0.07: cudnnRNNBackwardData_v8 writes into the reserve space
// that the next call reads). Its weights also need repacking each step (Keras' [F, 4U] column
// blocks against per-gate transposed matrices). This kernel is cpu_lstm.cpp's algorithm (the gate
// arithmetic is lstm_math.h's, shared with it and tested on the host), every
// buffer in a known layout and nothing written that a later call reads except what forward keeps:
//   forward   Z = x·W for all N·T rows in one sgemm; then per step Z_t += h_{t-1}·R ([N,U]x[U,4U],
//             rows strided by T·4U) and one gate kernel (bias, σ/tanh, c_t, h_t) over [N, U];
//   backward  per step dh = dZ_{t+1}·Rᵀ and one gate-gradient kernel over [N, U]; then one sgemm
//             each for dx = dZ·Wᵀ, dW = xᵀ·dZ and dR = H₋ᵀ·dZ (H₋: every step's h_{t-1}); db = the
//             column sums of dZ (cuda_reduce.cuh, fixed order).
// cuBLAS is deterministic on one stream and nothing else reduces, so gradients are bit-reproducible.
// Row-major matrices through column-major cuBLAS: see cuda_dense.cu (A row-major [R, C] with row
// stride ld is the column-major C x R matrix with leading dimension ld).

namespace trainer {
namespace {

constexpr const char* kOp = "lstm";

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) cuda::fail(kOp, ": ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
  return int(v);
}

// Step t of forward, one thread per (n, j) of [N, U]: z's row n·T + t holds the pre-activations
// [i | f | c | o] (x·W + h_{t-1}·R) and gets the activations; cs gets c_t; hp's row n·T + t + 1 gets
// h_t (the next step's h_{t-1}); y gets h_t (every step, or the last one only).
__global__ void gates_forward_kernel(float* __restrict__ z, float* __restrict__ cs, float* __restrict__ hp,
                                     float* __restrict__ y, const float* __restrict__ b, int64_t N, int64_t T,
                                     int64_t U, int64_t t, bool seq) {
  CUDA_GRID_LOOP(e, N * U) {
    const int64_t n = e / U, j = e % U, row = n * T + t, G = 4 * U;
    float* zr = z + row * G;
    const lstm_math::Cell s = lstm_math::cell_forward(zr[j], zr[U + j], zr[2 * U + j], zr[3 * U + j], b, U, j,
                                                      t > 0 ? cs[(row - 1) * U + j] : 0.0f, t > 0);
    zr[j] = s.i;
    zr[U + j] = s.f;
    zr[2 * U + j] = s.g;
    zr[3 * U + j] = s.o;
    cs[row * U + j] = s.c;
    if (t + 1 < T) hp[(row + 1) * U + j] = s.h;
    if (seq) y[row * U + j] = s.h;
    else if (t + 1 == T) y[n * U + j] = s.h;
  }
}

// Step t of backward, one thread per (n, j): dh (dL/dh_t from step t + 1, unused at the last
// step) plus the output's gradient, dc (dL/dc_t from step t + 1, replaced by dL/dc_{t-1}), and
// the activated gates give dz's row n·T + t.
__global__ void gates_backward_kernel(const float* __restrict__ z, const float* __restrict__ cs,
                                      const float* __restrict__ dy, const float* __restrict__ dh,
                                      float* __restrict__ dc, float* __restrict__ dz, int64_t N, int64_t T, int64_t U,
                                      int64_t t, bool seq) {
  CUDA_GRID_LOOP(e, N * U) {
    const int64_t n = e / U, j = e % U, row = n * T + t, G = 4 * U;
    const bool last = t + 1 == T;
    const float* zr = z + row * G;
    const float g_out = seq ? dy[row * U + j] : (last ? dy[n * U + j] : 0.0f);
    const lstm_math::CellGrad d = lstm_math::cell_backward(
        zr[j], zr[U + j], zr[2 * U + j], zr[3 * U + j], cs[row * U + j], t > 0 ? cs[(row - 1) * U + j] : 0.0f, t > 0,
        last ? 0.0f : dh[n * U + j], g_out, last ? 0.0f : dc[n * U + j]);
    float* dzr = dz + row * G;
    dzr[j] = d.dzi;
    dzr[U + j] = d.dzf;
    dzr[2 * U + j] = d.dzc;
    dzr[3 * U + j] = d.dzo;
    dc[n * U + j] = d.dc_prev;
  }
}

class CudaLstm final : public LstmKernel {
 public:
  CudaLstm(OpContext& ctx, const LstmParams& p) : LstmKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  // The header keeps track of whether a training forward of x's shape is in the buffers.
  void forward_impl(const lstm::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b, Tensor& y,
                    bool /*training*/) override {
    if (d.n == 0) return;
    const Buffers B = buffers(d);
    const int G = to_int(4 * d.u, "4 x units"), U = int(d.u), F = to_int(d.f, "features");
    const int NT = to_int(d.n * d.t, "batch x steps"), N = int(d.n);
    const int64_t T = d.t;
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h = c_.cublas();
    float* z = B.z;
    float* hp = B.hp;
    c_.fill_zero(hp, size_t(d.n * T * d.u) * sizeof(float));  // h_{-1} = 0 (rows n·T)
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, G, NT, F, &one, w.f32(), G, x.f32(), F, &zero, z, G));
    const int ldz = to_int(T * G, "steps x 4 x units"), ldh = to_int(T * U, "steps x units");
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0)  // Z_t += h_{t-1}·R
        CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, G, N, U, &one, r.f32(), G, hp + t * U, ldh, &one,
                                 z + t * G, ldz));
      TRAINER_LAUNCH(gates_forward_kernel, cuda::grid_for(d.n * d.u, c_), cuda::kBlock, c_.stream(), z, B.cs, hp,
                     y.f32(), p_.bias ? b.f32() : nullptr, d.n, T, d.u, t, p_.return_sequences);
    }
  }

  void backward_impl(const lstm::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& /*y*/,
                     const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) override {
    if (d.n == 0) {
      c_.fill_zero(dw.data(), dw.bytes());
      c_.fill_zero(dr.data(), dr.bytes());
      if (p_.bias) c_.fill_zero(db.data(), db.bytes());
      return;
    }
    const int G = int(4 * d.u), U = int(d.u), F = int(d.f), NT = int(d.n * d.t), N = int(d.n);
    const int64_t T = d.t;
    const int ldz = int(T * G);
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h = c_.cublas();
    const Buffers B = buffers(d);
    float* dz = B.dz;
    for (int64_t t = T - 1; t >= 0; --t) {
      if (t + 1 < T)  // dh = dZ_{t+1}·Rᵀ
        CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, U, N, G, &one, r.f32(), G, dz + (t + 1) * G, ldz, &zero,
                                 B.dh, U));
      TRAINER_LAUNCH(gates_backward_kernel, cuda::grid_for(d.n * d.u, c_), cuda::kBlock, c_.stream(), B.z, B.cs,
                     dy.f32(), B.dh, B.dc, dz, d.n, T, d.u, t, p_.return_sequences);
    }
    if (dx.defined())
      CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, F, NT, G, &one, w.f32(), G, dz, G, &zero, dx.f32(), F));
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, G, F, NT, &one, dz, G, x.f32(), F, &zero, dw.f32(), G));
    // h_{-1} = 0 rows add 0
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, G, U, NT, &one, dz, G, B.hp, U, &zero, dr.f32(), G));
    if (p_.bias) cuda::column_sums(bias_sums_, c_, static_cast<const float*>(dz), d.n * T, 4 * d.u, db.f32());
  }

  // The buffers for N·T rows (Scratch: grown, never shrunk, as the batch varies between training
  // and evaluation). A Tensor compared by numel() was not enough: an undefined tensor's numel() is
  // 1 (a rank-0 shape), so for N·T·U = 1 no buffer was made and the kernels got null pointers (the
  // n 1, t 1, f 1, u 1 case: an illegal access on 2026-11-22, cudaMemsetAsync's invalid argument on
  // 2026-11-26).
  struct Buffers {
    float *z, *hp, *cs, *dz, *dh, *dc;
  };
  Buffers buffers(const lstm::Dims& d) {
    const size_t rows = size_t(d.n * d.t), u = size_t(d.u), n = size_t(d.n);
    return {z_.as<float>(c_, rows * 4 * u), hp_.as<float>(c_, rows * u), cs_.as<float>(c_, rows * u),
            dz_.as<float>(c_, rows * 4 * u), dh_.as<float>(c_, n * u),   dc_.as<float>(c_, n * u)};
  }

  CudaContext& c_;
  // Rows n·T + t: z_ [N, T, 4U] gate pre-activations, then activations (kept for backward); hp_
  // [N, T, U] the hidden state each step starts from (h_{t-1}; zeros at t = 0); cs_ [N, T, U] cell
  // states; dz_ [N, T, 4U] gate pre-activation gradients; dh_, dc_ [N, U] the running state
  // gradients.
  Scratch z_, hp_, cs_, dz_, dh_, dc_;
  cuda::ColumnReducer bias_sums_;
};

static RegisterKernel<LstmKernel, CudaLstm> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
