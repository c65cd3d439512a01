// CPU lstm: Keras LSTM forward and backpropagation through time with oneDNN's sgemm and fused gate loops.
//
// Why sgemm and not oneDNN's LSTM primitive: the primitive's weights (ldigo, gates i, f, c, o)
// do match Keras' [F, 4U] layout, but its backward wants the weights reordered to ldgoi on every
// call, accumulates into the weight gradients, hides the gates in an opaque workspace and needs
// a separate diff_dst_iter path for the last-step-only output. A few GEMMs and two fused loops
// do the same work with every buffer in a known layout that the float64 tests can check:
//   forward   Z = x·W for all N·T rows in one GEMM; then per step Z_t += h_{t-1}·R
//             ([N,U]x[U,4U]) and one pass of gate math (lstm_math.h: bias, σ/tanh, c_t, h_t) over [N, U];
//   backward  per step dh = dZ_{t+1}·Rᵀ and one pass of gate-gradient math; then one GEMM each
//             for dx = dZ·Wᵀ, dW = xᵀ·dZ and dR = H₋ᵀ·dZ (H₋: every step's h_{t-1}); db = Σ dZ in
//             double, rows in order.
// Threads: the large GEMMs are oneDNN's (all threads). The recurrence is sequential in time but
// independent across samples, so each thread takes a contiguous slice of the batch and runs the
// whole time loop on it (cpu_recurrent.h's for_batch_slices, shared with cpu_gru.cpp).
// Buffers are batch-major (row n·T + t), so x and dx need no transposes; a step's rows are a
// strided view (leading dimension T·4U, resp. T·U).
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/ops/cpu/cpu_recurrent.h"
#include "core/ops/lstm.h"
#include "core/ops/math/lstm_math.h"

namespace trainer {
namespace {

using cpu::recurrent::for_batch_slices;
using cpu::recurrent::gemm;

void require(bool ok, const char* what) { cpu::recurrent::require(ok, "lstm", what); }

class CpuLstm final : public LstmKernel {
 public:
  CpuLstm(OpContext& ctx, const LstmParams& p) : LstmKernel(ctx, p) {}

 private:
  // The header keeps track of whether a training forward of x's shape is in the buffers.
  void forward_impl(const lstm::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b, Tensor& y,
                    bool /*training*/) override {
    if (d.n == 0) return;
    const int64_t U = d.u, G = 4 * U, T = d.t;
    grow(d);
    float* z = z_.data();
    float* hp = hp_.data();
    float* cs = cs_.data();
    const float* rp = r.f32();
    const float* bp = p_.bias ? b.f32() : nullptr;
    float* yp = y.f32();
    const bool seq = p_.return_sequences;
    require(gemm('N', 'N', d.n * T, G, d.f, x.f32(), d.f, w.f32(), G, 0.0f, z, G), "input projection");
    const bool ok = for_batch_slices(d.n, d.n * T * U * G, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) std::memset(hp + n * T * U, 0, size_t(U) * sizeof(float));  // h_{-1}
      for (int64_t t = 0; t < T; ++t) {
        if (t > 0 && !gemm('N', 'N', n1 - n0, G, U, hp + (n0 * T + t) * U, T * U, rp, G, 1.0f, z + (n0 * T + t) * G,
                           T * G))
          return false;
        for (int64_t n = n0; n < n1; ++n) {
          float* zr = z + (n * T + t) * G;  // [i | f | c | o], activated in place
          const float* c_prev = t > 0 ? cs + (n * T + t - 1) * U : nullptr;
          float* c_out = cs + (n * T + t) * U;
          float* h_next = t + 1 < T ? hp + (n * T + t + 1) * U : nullptr;  // h_t as the next step's h_{t-1}
          float* h_out = seq ? yp + (n * T + t) * U : (t + 1 == T ? yp + n * U : nullptr);
          for (int64_t j = 0; j < U; ++j) {
            const lstm_math::Cell s = lstm_math::cell_forward(zr[j], zr[U + j], zr[2 * U + j], zr[3 * U + j], bp, U, j,
                                                              c_prev ? c_prev[j] : 0.0f, c_prev != nullptr);
            zr[j] = s.i;
            zr[U + j] = s.f;
            zr[2 * U + j] = s.g;
            zr[3 * U + j] = s.o;
            c_out[j] = s.c;
            if (h_next) h_next[j] = s.h;
            if (h_out) h_out[j] = s.h;
          }
        }
      }
      return true;
    });
    require(ok, "recurrent step");
  }

  void backward_impl(const lstm::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& /*y*/,
                     const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) override {
    if (d.n == 0) {
      std::memset(dw.data(), 0, dw.bytes());
      std::memset(dr.data(), 0, dr.bytes());
      if (p_.bias) std::memset(db.data(), 0, db.bytes());
      return;
    }
    const int64_t U = d.u, G = 4 * U, T = d.t, N = d.n;
    const float* z = z_.data();  // activated gates
    const float* cs = cs_.data();
    const float* rp = r.f32();
    float* dz = dz_.data();
    float* dh = dh_.data();  // dL/dh_t from step t + 1 (then dy's is added)
    float* dc = dc_.data();  // dL/dc_t from step t + 1
    const float* gy = dy.f32();
    const bool seq = p_.return_sequences;
    const bool ok = for_batch_slices(N, N * T * U * G, [&](int64_t n0, int64_t n1) {
      std::memset(dc + n0 * U, 0, size_t((n1 - n0) * U) * sizeof(float));
      for (int64_t t = T - 1; t >= 0; --t) {
        if (t == T - 1) std::memset(dh + n0 * U, 0, size_t((n1 - n0) * U) * sizeof(float));
        else if (!gemm('N', 'T', n1 - n0, U, G, dz + (n0 * T + t + 1) * G, T * G, rp, G, 0.0f, dh + n0 * U, U))
          return false;
        for (int64_t n = n0; n < n1; ++n) {
          const float* zr = z + (n * T + t) * G;
          const float* c_now = cs + (n * T + t) * U;
          const float* c_prev = t > 0 ? c_now - U : nullptr;
          const float* g_out = seq ? gy + (n * T + t) * U : (t + 1 == T ? gy + n * U : nullptr);
          float* dzr = dz + (n * T + t) * G;
          float* dhr = dh + n * U;
          float* dcr = dc + n * U;
          for (int64_t j = 0; j < U; ++j) {
            const lstm_math::CellGrad d =
                lstm_math::cell_backward(zr[j], zr[U + j], zr[2 * U + j], zr[3 * U + j], c_now[j],
                                         c_prev ? c_prev[j] : 0.0f, c_prev != nullptr, dhr[j], g_out ? g_out[j] : 0.0f,
                                         dcr[j]);
            dzr[j] = d.dzi;
            dzr[U + j] = d.dzf;
            dzr[2 * U + j] = d.dzc;
            dzr[3 * U + j] = d.dzo;
            dcr[j] = d.dc_prev;
          }
        }
      }
      return true;
    });
    require(ok, "recurrent step");
    if (dx.defined()) require(gemm('N', 'T', N * T, d.f, G, dz, G, w.f32(), G, 0.0f, dx.f32(), d.f), "dx");
    require(gemm('T', 'N', d.f, G, N * T, x.f32(), d.f, dz, G, 0.0f, dw.f32(), G), "dw");
    require(gemm('T', 'N', U, G, N * T, hp_.data(), U, dz, G, 0.0f, dr.f32(), G), "dr");  // h_{-1} = 0 rows add 0
    if (p_.bias) cpu::recurrent::bias_grad(N * T, G, dz, G, db.f32());
  }

  // Buffers for N·T rows (grown, never shrunk: the batch varies between training and evaluation).
  void grow(const lstm::Dims& d) {
    const size_t rows = size_t(d.n * d.t), u = size_t(d.u);
    if (z_.size() < rows * 4 * u) {
      z_.resize(rows * 4 * u);
      dz_.resize(rows * 4 * u);
    }
    if (cs_.size() < rows * u) {
      cs_.resize(rows * u);
      hp_.resize(rows * u);
    }
    if (dh_.size() < size_t(d.n) * u) {
      dh_.resize(size_t(d.n) * u);
      dc_.resize(size_t(d.n) * u);
    }
  }

  // Workspace, rows n·T + t: z_ [N, T, 4U] gate pre-activations, then activations (kept for
  // backward); hp_ [N, T, U] the hidden state each step starts from (h_{t-1}; zeros at t = 0);
  // cs_ [N, T, U] cell states; dz_ [N, T, 4U] gate pre-activation gradients; dh_, dc_ [N, U]
  // the running state gradients.
  std::vector<float> z_, hp_, cs_, dz_, dh_, dc_;
};

static RegisterKernel<LstmKernel, CpuLstm> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
