// CPU gru: Keras GRU (reset_after) forward and backpropagation through time with oneDNN's sgemm and fused gate loops (cpu_lstm.cpp's scheme).
//
//   forward   A = x·W for all N·T rows in one GEMM; then per step M = h_{t-1}·R ([N,U]x[U,3U]; none
//             at t = 0) and one pass of gate math (gru_math.h: biases, σ/tanh, h_t) over [N, U];
//   backward  per step dh = dh_direct + dM_{t+1}·Rᵀ and one pass of gate-gradient math; then one
//             GEMM each for dx = dA·Wᵀ, dW = xᵀ·dA and dR = H₋ᵀ·dM (H₋: every step's h_{t-1});
//             db = the column sums of dA (input row) and dM (recurrent row), in double, rows in order.
// dA and dM share the z and r columns (the input and recurrent projections enter those gates as a
// sum); their h columns differ (dM's is scaled by r). Threads as in cpu_lstm.cpp (cpu_recurrent.h).
#include <cstring>
#include <vector>

#include "core/ops/cpu/cpu_recurrent.h"
#include "core/ops/gru.h"
#include "core/ops/math/gru_math.h"

namespace trainer {
namespace {

using cpu::recurrent::bias_grad;
using cpu::recurrent::for_batch_slices;
using cpu::recurrent::gemm;

void require(bool ok, const char* what) { cpu::recurrent::require(ok, "gru", what); }

class CpuGru final : public GruKernel {
 public:
  CpuGru(OpContext& ctx, const GruParams& p) : GruKernel(ctx, p) {}

 private:
  void forward_impl(const gru::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b, Tensor& y,
                    bool /*training*/) override {
    if (d.n == 0) return;
    const int64_t U = d.u, G = 3 * U, T = d.t;
    grow(d);
    float* a = a_.data();
    float* m = m_.data();
    float* mh = mh_.data();
    float* hp = hp_.data();
    const float* rp = r.f32();
    const float* bp = p_.bias ? b.f32() : nullptr;
    float* yp = y.f32();
    const bool seq = p_.return_sequences;
    require(gemm('N', 'N', d.n * T, G, d.f, x.f32(), d.f, w.f32(), G, 0.0f, a, G), "input projection");
    const bool ok = for_batch_slices(d.n, d.n * T * U * G, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) std::memset(hp + n * T * U, 0, size_t(U) * sizeof(float));  // h_{-1}
      for (int64_t t = 0; t < T; ++t) {
        if (t > 0 && !gemm('N', 'N', n1 - n0, G, U, hp + (n0 * T + t) * U, T * U, rp, G, 0.0f, m + n0 * G, G))
          return false;
        for (int64_t n = n0; n < n1; ++n) {
          float* ar = a + (n * T + t) * G;  // [z | r | h] projections, then the gates z, r, hh
          const float* mr = m + n * G;
          const float* h_prev = hp + (n * T + t) * U;
          float* h_next = t + 1 < T ? hp + (n * T + t + 1) * U : nullptr;  // h_t as the next step's h_{t-1}
          float* h_out = seq ? yp + (n * T + t) * U : (t + 1 == T ? yp + n * U : nullptr);
          for (int64_t j = 0; j < U; ++j) {
            const bool first = t == 0;
            const gru_math::Cell s =
                gru_math::cell_forward(ar[j], ar[U + j], ar[2 * U + j], first ? 0.0f : mr[j], first ? 0.0f : mr[U + j],
                                       first ? 0.0f : mr[2 * U + j], bp, U, j, h_prev[j]);
            ar[j] = s.z;
            ar[U + j] = s.r;
            ar[2 * U + j] = s.hh;
            mh[(n * T + t) * U + j] = s.mh;
            if (h_next) h_next[j] = s.h;
            if (h_out) h_out[j] = s.h;
          }
        }
      }
      return true;
    });
    require(ok, "recurrent step");
  }

  void backward_impl(const gru::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& dy,
                     Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) override {
    if (d.n == 0) {
      std::memset(dw.data(), 0, dw.bytes());
      std::memset(dr.data(), 0, dr.bytes());
      if (p_.bias) std::memset(db.data(), 0, db.bytes());
      return;
    }
    const int64_t U = d.u, G = 3 * U, T = d.t, N = d.n;
    const float* a = a_.data();  // the gates z, r, hh
    const float* mh = mh_.data();
    const float* hp = hp_.data();
    const float* rp = r.f32();
    float* da = da_.data();
    float* dm = dm_.data();
    float* dh = dh_.data();  // dL/dh_t: the direct part from step t + 1, then the recurrent GEMM's
    const float* gy = dy.f32();
    const bool seq = p_.return_sequences;
    const bool ok = for_batch_slices(N, N * T * U * G, [&](int64_t n0, int64_t n1) {
      std::memset(dh + n0 * U, 0, size_t((n1 - n0) * U) * sizeof(float));
      for (int64_t t = T - 1; t >= 0; --t) {
        if (t + 1 < T && !gemm('N', 'T', n1 - n0, U, G, dm + (n0 * T + t + 1) * G, T * G, rp, G, 1.0f, dh + n0 * U, U))
          return false;
        for (int64_t n = n0; n < n1; ++n) {
          const int64_t row = n * T + t;
          const float* g = a + row * G;
          const float* g_out = seq ? gy + row * U : (t + 1 == T ? gy + n * U : nullptr);
          float* dar = da + row * G;
          float* dmr = dm + row * G;
          float* dhr = dh + n * U;
          for (int64_t j = 0; j < U; ++j) {
            const gru_math::CellGrad c = gru_math::cell_backward(g[j], g[U + j], g[2 * U + j], mh[row * U + j],
                                                                 hp[row * U + j], dhr[j] + (g_out ? g_out[j] : 0.0f));
            dar[j] = dmr[j] = c.daz;
            dar[U + j] = dmr[U + j] = c.dar;
            dar[2 * U + j] = c.dah;
            dmr[2 * U + j] = c.dmh;
            dhr[j] = c.dh_prev;
          }
        }
      }
      return true;
    });
    require(ok, "recurrent step");
    if (dx.defined()) require(gemm('N', 'T', N * T, d.f, G, da, G, w.f32(), G, 0.0f, dx.f32(), d.f), "dx");
    require(gemm('T', 'N', d.f, G, N * T, x.f32(), d.f, da, G, 0.0f, dw.f32(), G), "dw");
    require(gemm('T', 'N', U, G, N * T, hp, U, dm, G, 0.0f, dr.f32(), G), "dr");  // h_{-1} = 0 rows add 0
    if (p_.bias) {
      bias_grad(N * T, G, da, G, db.f32());
      bias_grad(N * T, G, dm, G, db.f32() + G);
    }
  }

  // Buffers for N·T rows (grown, never shrunk: the batch varies between training and evaluation).
  void grow(const gru::Dims& d) {
    const size_t rows = size_t(d.n * d.t), u = size_t(d.u), n = size_t(d.n);
    if (a_.size() < rows * 3 * u) {
      a_.resize(rows * 3 * u);
      da_.resize(rows * 3 * u);
      dm_.resize(rows * 3 * u);
    }
    if (mh_.size() < rows * u) {
      mh_.resize(rows * u);
      hp_.resize(rows * u);
    }
    if (m_.size() < n * 3 * u) {
      m_.resize(n * 3 * u);
      dh_.resize(n * u);
    }
  }

  // Workspace, rows n·T + t: a_ [N, T, 3U] input projections, then the gates z, r, hh (kept for
  // backward); mh_ [N, T, U] the recurrent h projection with its bias; hp_ [N, T, U] the hidden
  // state each step starts from (zeros at t = 0); m_ [N, 3U] one step's recurrent projections;
  // da_, dm_ [N, T, 3U] the input and recurrent projections' gradients; dh_ [N, U] the running one.
  std::vector<float> a_, m_, mh_, hp_, da_, dm_, dh_;
};

static RegisterKernel<GruKernel, CpuGru> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
