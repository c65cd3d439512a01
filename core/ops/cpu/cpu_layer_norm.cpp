// CPU layer norm: rows in parallel, their statistics kept from forward for backward; the parameter gradients as fixed blocks of rows added in block order (the same bits at any thread count).
#include <algorithm>

#include "core/ops/cpu/cpu_util.h"
#include "core/ops/fast_paths.h"
#include "core/ops/layer_norm.h"
#include "core/ops/math/layernorm_math.h"

namespace trainer {
namespace {

using ln::RowStats;

// Two passes over the row, sums in double (layernorm_math.h).
inline RowStats row_stats(const float* x, int64_t C, float eps) {
  const float shift = x[0];
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < C; ++j) s += double(x[j] - shift);
  const float mean = float(s / double(C));
  double q = 0;
#pragma omp simd reduction(+ : q)
  for (int64_t j = 0; j < C; ++j) {
    const double d = double((x[j] - shift) - mean);
    q += d * d;
  }
  return {shift, mean, ln::rstd_of(q, C, eps)};
}

// Rows per block of the parameter gradients' partial sums: a function of the row count alone, at
// least 64, so that there are at most kMaxBlocks blocks.
constexpr int64_t kMinRowsPerBlock = 64, kMaxBlocks = 256;
inline int64_t rows_per_block(int64_t rows) { return std::max(kMinRowsPerBlock, (rows + kMaxBlocks - 1) / kMaxBlocks); }

class CpuLayerNorm final : public LayerNormKernel {
 public:
  CpuLayerNorm(OpContext& ctx, const LayerNormParams& p)
      : LayerNormKernel(ctx, p), ctx_(ctx), add_dx_(ctx.fast_paths().has(FastPath::AddDx)) {}
  bool adds_dx() const override { return add_dx_; }
  bool keeps_stats() const override { return true; }

 private:
  void forward_impl(int64_t rows, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y) override {
    const int64_t C = p_.features;
    const float* xp = x.f32();
    const float* gp = gamma.defined() ? gamma.f32() : nullptr;
    const float* bp = beta.defined() ? beta.f32() : nullptr;
    float* yp = y.f32();
    const float eps = p_.epsilon;
#pragma omp parallel for schedule(static) if (rows * C > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = xp + r * C;
      float* yr = yp + r * C;
      const RowStats st = row_stats(xr, C, eps);
      if (keep_) keep_[3 * r] = st.shift, keep_[3 * r + 1] = st.mean, keep_[3 * r + 2] = st.rstd;
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) yr[j] = ln::forward(xr[j], st, gp ? gp[j] : 1.0f, bp ? bp[j] : 0.0f);
    }
  }

  void backward_impl(int64_t rows, const Tensor& x, const Tensor& gamma, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                     Tensor& dbeta) override {
    backward_rows(rows, x, gamma, dy, dx, dgamma, dbeta, false);
  }
  void backward_add_impl(int64_t rows, const Tensor& x, const Tensor& gamma, const Tensor& dy, Tensor& dx,
                         Tensor& dgamma, Tensor& dbeta) override {
    backward_rows(rows, x, gamma, dy, dx, dgamma, dbeta, true);
  }

  // add: dx += the input gradient (the one rounding of old + new the executor's separate sum makes).
  void backward_rows(int64_t rows, const Tensor& x, const Tensor& gamma, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                     Tensor& dbeta, bool add) {
    const int64_t C = p_.features;
    const float* xp = x.f32();
    const float* gp = gamma.defined() ? gamma.f32() : nullptr;
    const float* dyp = dy.f32();
    float* dxp = dx.defined() ? dx.f32() : nullptr;
    float* dgp = dgamma.defined() ? dgamma.f32() : nullptr;
    float* dbp = dbeta.defined() ? dbeta.f32() : nullptr;
    const bool params = dgp || dbp;
    const int64_t per = rows_per_block(rows), blocks = (rows + per - 1) / per;
    // Block b's partials: Σ dy·x̂ in part[b·2C .. +C), Σ dy in part[b·2C + C .. +C).
    double* part = params ? partials_.as<double>(ctx_, size_t(std::max<int64_t>(blocks, 1) * 2 * C)) : nullptr;
    const float eps = p_.epsilon;
    const float* kept = kept_;  // the forward's statistics of these rows, else computed again
#pragma omp parallel for schedule(static) if (rows * C > cpu::kParallelGrain)
    for (int64_t b = 0; b < blocks; ++b) {
      double* pg = params ? part + b * 2 * C : nullptr;
      double* pb = params ? pg + C : nullptr;
      if (params) std::fill(pg, pg + 2 * C, 0.0);
      for (int64_t r = b * per; r < std::min(rows, (b + 1) * per); ++r) {
        const float* xr = xp + r * C;
        const float* gr = dyp + r * C;
        const RowStats st = kept ? RowStats{kept[3 * r], kept[3 * r + 1], kept[3 * r + 2]} : row_stats(xr, C, eps);
        if (dxp) {
          double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
          for (int64_t j = 0; j < C; ++j) {
            const float g = gr[j] * (gp ? gp[j] : 1.0f);
            sg += double(g);
            sgx += double(g) * double(ln::normalise(xr[j], st));
          }
          const float mg = float(sg / double(C)), mgx = float(sgx / double(C));
          float* dr = dxp + r * C;
          if (add) {
#pragma omp simd
            for (int64_t j = 0; j < C; ++j)
              dr[j] += ln::input_grad(gr[j] * (gp ? gp[j] : 1.0f), ln::normalise(xr[j], st), mg, mgx, st.rstd);
          } else {
#pragma omp simd
            for (int64_t j = 0; j < C; ++j)
              dr[j] = ln::input_grad(gr[j] * (gp ? gp[j] : 1.0f), ln::normalise(xr[j], st), mg, mgx, st.rstd);
          }
        }
        if (params) {
#pragma omp simd
          for (int64_t j = 0; j < C; ++j) {
            pg[j] += double(gr[j]) * double(ln::normalise(xr[j], st));
            pb[j] += double(gr[j]);
          }
        }
      }
    }
    if (!params) return;
#pragma omp parallel for schedule(static) if (blocks * C > cpu::kParallelGrain)
    for (int64_t j = 0; j < C; ++j) {
      double sg = 0, sb = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        sg += part[b * 2 * C + j];
        sb += part[b * 2 * C + C + j];
      }
      if (dgp) dgp[j] = float(sg);
      if (dbp) dbp[j] = float(sb);
    }
  }

  OpContext& ctx_;
  const bool add_dx_;  // FastPath::AddDx
  Scratch partials_;
};

static RegisterKernel<LayerNormKernel, CpuLayerNorm> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
