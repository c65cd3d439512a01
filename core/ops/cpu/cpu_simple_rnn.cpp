// CPU simple_rnn: Keras SimpleRNN forward and backpropagation through time with oneDNN's sgemm and a fused activation loop (cpu_gru.cpp's scheme).
//
//   forward   A = x·W for all N·T rows in one GEMM; then per step A_t += h_{t-1}·R (none at t = 0)
//             and one pass of bias + activation (simple_rnn_math.h) over [N, U], A_t becoming h_t;
//   backward  per step dh = dh_direct + dA_{t+1}·Rᵀ and dA_t = dh·act'(h_t); then one GEMM each for
//             dx = dA·Wᵀ, dW = xᵀ·dA and dR = H₋ᵀ·dA (H₋: every step's h_{t-1}); db = the column
//             sums of dA, in double, rows in order. Threads as in cpu_lstm.cpp (cpu_recurrent.h).
#include <cstring>
#include <vector>

#include "core/ops/cpu/cpu_recurrent.h"
#include "core/ops/simple_rnn.h"

namespace trainer {
namespace {

using cpu::recurrent::bias_grad;
using cpu::recurrent::for_batch_slices;
using cpu::recurrent::gemm;

void require(bool ok, const char* what) { cpu::recurrent::require(ok, "simple_rnn", what); }

class CpuSimpleRnn final : public SimpleRnnKernel {
 public:
  CpuSimpleRnn(OpContext& ctx, const SimpleRnnParams& p) : SimpleRnnKernel(ctx, p) {}

 private:
  void forward_impl(const simple_rnn::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b,
                    Tensor& y, bool /*training*/) override {
    if (d.n == 0) return;
    const int64_t U = d.u, T = d.t;
    grow(d);
    float* a = a_.data();
    float* hp = hp_.data();
    const float* rp = r.f32();
    const float* bp = p_.bias ? b.f32() : nullptr;
    float* yp = y.f32();
    const bool seq = p_.return_sequences;
    const simple_rnn_math::Act act = p_.activation;
    require(gemm('N', 'N', d.n * T, U, d.f, x.f32(), d.f, w.f32(), U, 0.0f, a, U), "input projection");
    const bool ok = for_batch_slices(d.n, d.n * T * U * U, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) std::memset(hp + n * T * U, 0, size_t(U) * sizeof(float));  // h_{-1}
      for (int64_t t = 0; t < T; ++t) {
        // A_t += h_{t-1}·R for the slice's rows n·T + t (stride T·U)
        if (t > 0 && !gemm('N', 'N', n1 - n0, U, U, hp + (n0 * T + t) * U, T * U, rp, U, 1.0f, a + (n0 * T + t) * U,
                           T * U))
          return false;
        for (int64_t n = n0; n < n1; ++n) {
          float* ar = a + (n * T + t) * U;  // the pre-activation, then h_t (kept for backward)
          float* h_next = t + 1 < T ? hp + (n * T + t + 1) * U : nullptr;
          float* h_out = seq ? yp + (n * T + t) * U : (t + 1 == T ? yp + n * U : nullptr);
          for (int64_t j = 0; j < U; ++j) {
            const float h = simple_rnn_math::activate(act, ar[j] + (bp ? bp[j] : 0.0f));
            ar[j] = h;
            if (h_next) h_next[j] = h;
            if (h_out) h_out[j] = h;
          }
        }
      }
      return true;
    });
    require(ok, "recurrent step");
  }

  void backward_impl(const simple_rnn::Dims& d, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& dy,
                     Tensor& dx, Tensor& dw, Tensor& dr, Tensor& db) override {
    if (d.n == 0) {
      std::memset(dw.data(), 0, dw.bytes());
      std::memset(dr.data(), 0, dr.bytes());
      if (p_.bias) std::memset(db.data(), 0, db.bytes());
      return;
    }
    const int64_t U = d.u, T = d.t, N = d.n;
    const float* hs = a_.data();  // h_t of every step
    const float* hp = hp_.data();
    const float* rp = r.f32();
    float* da = da_.data();
    float* dh = dh_.data();  // dL/dh_t: the recurrent GEMM's part from step t + 1
    const float* gy = dy.f32();
    const bool seq = p_.return_sequences;
    const simple_rnn_math::Act act = p_.activation;
    const bool ok = for_batch_slices(N, N * T * U * U, [&](int64_t n0, int64_t n1) {
      std::memset(dh + n0 * U, 0, size_t((n1 - n0) * U) * sizeof(float));
      for (int64_t t = T - 1; t >= 0; --t) {
        if (t + 1 < T && !gemm('N', 'T', n1 - n0, U, U, da + (n0 * T + t + 1) * U, T * U, rp, U, 0.0f, dh + n0 * U, U))
          return false;
        for (int64_t n = n0; n < n1; ++n) {
          const int64_t row = n * T + t;
          const float* g_out = seq ? gy + row * U : (t + 1 == T ? gy + n * U : nullptr);
          for (int64_t j = 0; j < U; ++j) {
            const float gh = (t + 1 < T ? dh[n * U + j] : 0.0f) + (g_out ? g_out[j] : 0.0f);
            da[row * U + j] = simple_rnn_math::pre_grad(act, hs[row * U + j], gh);
          }
        }
      }
      return true;
    });
    require(ok, "recurrent step");
    if (dx.defined()) require(gemm('N', 'T', N * T, d.f, U, da, U, w.f32(), U, 0.0f, dx.f32(), d.f), "dx");
    require(gemm('T', 'N', d.f, U, N * T, x.f32(), d.f, da, U, 0.0f, dw.f32(), U), "dw");
    require(gemm('T', 'N', U, U, N * T, hp, U, da, U, 0.0f, dr.f32(), U), "dr");  // h_{-1} = 0 rows add 0
    if (p_.bias) bias_grad(N * T, U, da, U, db.f32());
  }

  // Buffers for N·T rows (grown, never shrunk: the batch varies between training and evaluation).
  void grow(const simple_rnn::Dims& d) {
    const size_t rows = size_t(d.n * d.t), u = size_t(d.u);
    if (a_.size() < rows * u) {
      a_.resize(rows * u);
      hp_.resize(rows * u);
      da_.resize(rows * u);
    }
    if (dh_.size() < size_t(d.n) * u) dh_.resize(size_t(d.n) * u);
  }

  // Workspace, rows n·T + t: a_ [N, T, U] the pre-activations, then h_t (kept for backward); hp_
  // [N, T, U] the state each step starts from (zeros at t = 0); da_ [N, T, U] the pre-activations'
  // gradients; dh_ [N, U] the running dL/dh.
  std::vector<float> a_, hp_, da_, dh_;
};

static RegisterKernel<SimpleRnnKernel, CpuSimpleRnn> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
