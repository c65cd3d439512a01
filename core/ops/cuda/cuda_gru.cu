// CUDA gru: Keras GRU (reset_after) forward and backpropagation through time with cuBLAS sgemm and fused gate kernels (cpu_gru.cpp's algorithm).
#include <climits>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_reduce.cuh"
#include "core/ops/gru.h"
#include "core/ops/math/gru_math.h"

// cpu_gru.cpp's algorithm with cuda_lstm.cpp's conventions (not cuDNN's RNN API: see cuda_lstm.cu):
//   forward   A = x·W for all N·T rows in one sgemm; per step M = h_{t-1}·R into a [N, 3U] buffer
//             (none at t = 0) and one gate kernel (gru_math.h) over [N, U];
//   backward  per step dh += dM_{t+1}·Rᵀ and one gate-gradient kernel over [N, U]; then one sgemm
//             each for dx, dW, dR; db's two rows the column sums of dA and dM (fixed order).
// Row-major matrices through column-major cuBLAS: see cuda_dense.cu.

namespace trainer {
namespace {

constexpr const char* kOp = "gru";

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) cuda::fail(kOp, ": ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
  return int(v);
}

// Step t of forward, one thread per (n, j) of [N, U]: a's row n·T + t holds the input projections
// [z | r | h] and gets the gates z, r, hh; mh the recurrent h projection with its bias; hp's row
// n·T + t + 1 gets h_t; y gets h_t (every step, or the last one only).
__global__ void gates_forward_kernel(float* __restrict__ a, const float* __restrict__ m, float* __restrict__ mh,
                                     float* __restrict__ hp, float* __restrict__ y, const float* __restrict__ b,
                                     int64_t N, int64_t T, int64_t U, int64_t t, bool seq) {
  CUDA_GRID_LOOP(e, N * U) {
    const int64_t n = e / U, j = e % U, row = n * T + t, G = 3 * U;
    float* ar = a + row * G;
    const float* mr = m + n * G;
    const bool first = t == 0;
    const gru_math::Cell s = gru_math::cell_forward(ar[j], ar[U + j], ar[2 * U + j], first ? 0.0f : mr[j],
                                                    first ? 0.0f : mr[U + j], first ? 0.0f : mr[2 * U + j], b, U, j,
                                                    hp[row * U + j]);
    ar[j] = s.z;
    ar[U + j] = s.r;
    ar[2 * U + j] = s.hh;
    mh[row * U + j] = s.mh;
    if (t + 1 < T) hp[(row + 1) * U + j] = s.h;
    if (seq) y[row * U + j] = s.h;
    else if (t + 1 == T) y[n * U + j] = s.h;
  }
}

// Step t of backward, one thread per (n, j): dh (dL/dh_t from step t + 1, 0 at the last step) plus
// the output's gradient give the rows n·T + t of dA and dM; dh gets the direct part of dL/dh_{t-1}.
__global__ void gates_backward_kernel(const float* __restrict__ a, const float* __restrict__ mh,
                                      const float* __restrict__ hp, const float* __restrict__ dy, float* __restrict__ dh,
                                      float* __restrict__ da, float* __restrict__ dm, int64_t N, int64_t T, int64_t U,
                                      int64_t t, bool seq) {
  CUDA_GRID_LOOP(e, N * U) {
    const int64_t n = e / U, j = e % U, row = n * T + t, G = 3 * U;
    const bool last = t + 1 == T;
    const float* g = a + row * G;
    const float g_out = seq ? dy[row * U + j] : (last ? dy[n * U + j] : 0.0f);
    const gru_math::CellGrad c = gru_math::cell_backward(g[j], g[U + j], g[2 * U + j], mh[row * U + j],
                                                         hp[row * U + j], (last ? 0.0f : dh[n * U + j]) + g_out);
    da[row * G + j] = dm[row * G + j] = c.daz;
    da[row * G + U + j] = dm[row * G + U + j] = c.dar;
    da[row * G + 2 * U + j] = c.dah;
    dm[row * G + 2 * U + j] = c.dmh;
    dh[n * U + j] = c.dh_prev;
  }
}

class CudaGru final : public GruKernel {
 public:
  CudaGru(OpContext& ctx, const GruParams& p) : GruKernel(ctx, p), c_(cuda_context(ctx)) {}

 private:
  void forward_impl(const gru::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b, Tensor& y,
                    bool /*training*/) override {
    if (d.n == 0) return;
    const Buffers B = buffers(d);
    const int G = to_int(3 * d.u, "3 x units"), U = int(d.u), F = to_int(d.f, "features");
    const int NT = to_int(d.n * d.t, "batch x steps"), N = int(d.n);
    const int64_t T = d.t;
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h = c_.cublas();
    c_.fill_zero(B.hp, size_t(d.n * T * d.u) * sizeof(float));  // h_{-1} = 0 (rows n·T)
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, G, NT, F, &one, w.f32(), G, x.f32(), F, &zero, B.a, G));
    const int ldh = to_int(T * U, "steps x units");
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0)  // M = h_{t-1}·R
        CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, G, N, U, &one, r.f32(), G, B.hp + t * U, ldh, &zero, B.m, G));
      TRAINER_LAUNCH(gates_forward_kernel, cuda::grid_for(d.n * d.u, c_), cuda::kBlock, c_.stream(), B.a, B.m, B.mh,
                     B.hp, y.f32(), p_.bias ? b.f32() : nullptr, d.n, T, d.u, t, p_.return_sequences);
    }
  }

  void backward_impl(const gru::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& dy,
                     Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) override {
    if (d.n == 0) {
      c_.fill_zero(dw.data(), dw.bytes());
      c_.fill_zero(dr.data(), dr.bytes());
      if (p_.bias) c_.fill_zero(db.data(), db.bytes());
      return;
    }
    const int G = int(3 * d.u), U = int(d.u), F = int(d.f), NT = int(d.n * d.t), N = int(d.n);
    const int64_t T = d.t;
    const int ldm = int(T * G);
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h = c_.cublas();
    const Buffers B = buffers(d);
    for (int64_t t = T - 1; t >= 0; --t) {
      if (t + 1 < T)  // dh += dM_{t+1}·Rᵀ
        CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, U, N, G, &one, r.f32(), G, B.dm + (t + 1) * G, ldm, &one,
                                 B.dh, U));
      TRAINER_LAUNCH(gates_backward_kernel, cuda::grid_for(d.n * d.u, c_), cuda::kBlock, c_.stream(), B.a, B.mh, B.hp,
                     dy.f32(), B.dh, B.da, B.dm, d.n, T, d.u, t, p_.return_sequences);
    }
    if (dx.defined())
      CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, F, NT, G, &one, w.f32(), G, B.da, G, &zero, dx.f32(), F));
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, G, F, NT, &one, B.da, G, x.f32(), F, &zero, dw.f32(), G));
    // h_{-1} = 0 rows add 0
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, G, U, NT, &one, B.dm, G, B.hp, U, &zero, dr.f32(), G));
    if (p_.bias) {
      cuda::column_sums(bias_in_, c_, static_cast<const float*>(B.da), d.n * T, 3 * d.u, db.f32());
      cuda::column_sums(bias_rec_, c_, static_cast<const float*>(B.dm), d.n * T, 3 * d.u, db.f32() + G);
    }
  }

  // The buffers for N·T rows (Scratch: grown, never shrunk; see cuda_lstm.cu on why not Tensors).
  struct Buffers {
    float *a, *m, *mh, *hp, *da, *dm, *dh;
  };
  Buffers buffers(const gru::Dims& d) {
    const size_t rows = size_t(d.n * d.t), u = size_t(d.u), n = size_t(d.n);
    return {a_.as<float>(c_, rows * 3 * u),  m_.as<float>(c_, n * 3 * u),     mh_.as<float>(c_, rows * u),
            hp_.as<float>(c_, rows * u),     da_.as<float>(c_, rows * 3 * u), dm_.as<float>(c_, rows * 3 * u),
            dh_.as<float>(c_, n * u)};
  }

  CudaContext& c_;
  // cpu_gru.cpp's workspace: a_ [N, T, 3U] projections then gates; m_ [N, 3U] one step's recurrent
  // projections; mh_ [N, T, U]; hp_ [N, T, U] h_{t-1}; da_, dm_ [N, T, 3U]; dh_ [N, U].
  Scratch a_, m_, mh_, hp_, da_, dm_, dh_;
  cuda::ColumnReducer bias_in_, bias_rec_;
};

static RegisterKernel<GruKernel, CudaGru> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
