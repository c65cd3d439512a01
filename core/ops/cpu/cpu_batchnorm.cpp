// CPU batchnorm: per-channel statistics, normalisation and gradients in vectorised OpenMP loops over [rows, C].
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/ops/batchnorm.h"
#include "core/ops/cpu/cpu_context.h"
#include "core/ops/cpu/cpu_util.h"

namespace trainer {
namespace {

// Reductions over rows are split in chunks whose count depends on the row count only, and the
// chunk results are added in order, so the statistics do not depend on the thread count. Inside a
// chunk, blocks of kBlock rows are summed in float (vectorised) and added to double accumulators.
constexpr int64_t kBlock = 64;

struct Chunks {
  int64_t n, rows;  // number of chunks, rows per chunk
};

Chunks chunking(int64_t m) {
  int64_t n = std::clamp<int64_t>((m + 255) / 256, 1, 64);
  return {n, (m + n - 1) / n};
}

// Two per-channel sums over all rows: the row kernel `row(r, fs, fq)` adds its row's terms into the
// float accumulators fs[C] and fq[C]. Returns [2C] doubles (the sums of fs, then of fq), valid until
// the thread's next reduction.
template <class RowFn>
const double* reduce_rows(int64_t m, int64_t C, const RowFn& row) {
  Chunks ch = chunking(m);
  size_t nd = size_t(ch.n) * 2 * C;
  double* out = static_cast<double*>(cpu::thread_scratch(cpu::kScratchReduce, nd * (sizeof(double) + sizeof(float))));
  float* ftmp = reinterpret_cast<float*>(out + nd);
#pragma omp parallel for schedule(static) if (m * C > cpu::kParallelGrain)
  for (int64_t k = 0; k < ch.n; ++k) {
    double* ds = out + k * 2 * C;
    double* dq = ds + C;
    float* fs = ftmp + k * 2 * C;
    float* fq = fs + C;
    std::fill(ds, ds + 2 * C, 0.0);
    int64_t r1 = std::min(m, (k + 1) * ch.rows);
    for (int64_t r = k * ch.rows; r < r1; r += kBlock) {
      std::fill(fs, fs + 2 * C, 0.0f);
      int64_t re = std::min(r1, r + kBlock);
      for (int64_t i = r; i < re; ++i) row(i, fs, fq);
      for (int64_t c = 0; c < C; ++c) {
        ds[c] += fs[c];
        dq[c] += fq[c];
      }
    }
  }
  for (int64_t k = 1; k < ch.n; ++k)
    for (int64_t c = 0; c < 2 * C; ++c) out[c] += out[k * 2 * C + c];
  return out;
}

// [2C]: per channel, sum dy, then sum dy * (x - mean) (x and dy [m, C]); as reduce_rows.
const double* reduce_dy_dyxmu(const float* xp, const float* dyp, const float* mean, int64_t m, int64_t C) {
  return reduce_rows(m, C, [&](int64_t r, float* __restrict fs, float* __restrict fq) {
    const float* __restrict xr = xp + r * C;
    const float* __restrict dr = dyp + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      fs[c] += dr[c];
      fq[c] += dr[c] * (xr[c] - mean[c]);
    }
  });
}

// y[r, c] = x[r, c] * a[c] + b[c]
void affine_rows(const float* __restrict x, const float* __restrict a, const float* __restrict b, float* __restrict y,
                 int64_t m, int64_t C) {
#pragma omp parallel for schedule(static) if (m * C > cpu::kParallelGrain)
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * a[c] + b[c];
  }
}

class CpuBatchNorm final : public BatchNormKernel {
 public:
  CpuBatchNorm(OpContext&, const BatchNormParams& p) : p_(p) {
    if (!(p.epsilon > 0)) cpu::fail("batchnorm: epsilon must be positive, got {}", p.epsilon);
  }

  void forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                     Tensor& save_invstd, Tensor& running_mean, Tensor& running_var) override {
    int64_t C = channels(x);
    int64_t m = C ? x.numel() / C : 0;
    check_vec("gamma", gamma, C, true);
    check_vec("beta", beta, C, true);
    check_vec("save_mean", save_mean, C, false);
    check_vec("save_invstd", save_invstd, C, false);
    check_vec("running_mean", running_mean, C, false);
    check_vec("running_var", running_var, C, false);
    cpu::require_shape("batchnorm", "y", y, x.shape());
    if (C == 0) return;
    float* mean = save_mean.f32();
    float* invstd = save_invstd.f32();
    if (m == 0) {  // no samples: no statistics; leave the running statistics alone
      std::fill(mean, mean + C, 0.0f);
      for (int64_t c = 0; c < C; ++c) invstd[c] = 1.0f / std::sqrt(p_.epsilon);
      return;
    }
    const float* xp = x.f32();
    // Shifting by the first row keeps the one-pass variance accurate when |mean| >> std.
    std::vector<float> shift(xp, xp + C);
    const float* sh = shift.data();
    const double* part = reduce_rows(m, C, [&](int64_t r, float* __restrict fs, float* __restrict fq) {
      const float* __restrict xr = xp + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        float d = xr[c] - sh[c];
        fs[c] += d;
        fq[c] += d * d;
      }
    });
    std::vector<float> a(C), b(C);
    float* rm = running_mean.f32();
    float* rv = running_var.f32();
    const double mom = p_.momentum;
    for (int64_t c = 0; c < C; ++c) {
      double dmean = part[c] / double(m);
      double var = std::max(part[C + c] / double(m) - dmean * dmean, 0.0);
      double mu = shift[c] + dmean;
      double is = 1.0 / std::sqrt(var + double(p_.epsilon));
      mean[c] = float(mu);
      invstd[c] = float(is);
      double g = gamma.defined() ? gamma.f32()[c] : 1.0;
      double be = beta.defined() ? beta.f32()[c] : 0.0;
      a[c] = float(g * is);
      b[c] = float(be - mu * g * is);
      double unbiased = m > 1 ? var * double(m) / double(m - 1) : 0.0;
      rm[c] = float(mom * rm[c] + (1.0 - mom) * mu);
      rv[c] = float(mom * rv[c] + (1.0 - mom) * unbiased);
    }
    affine_rows(xp, a.data(), b.data(), y.f32(), m, C);
  }

  void forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                     const Tensor& running_var, Tensor& y) override {
    int64_t C = channels(x);
    int64_t m = C ? x.numel() / C : 0;
    check_vec("gamma", gamma, C, true);
    check_vec("beta", beta, C, true);
    check_vec("running_mean", running_mean, C, false);
    check_vec("running_var", running_var, C, false);
    cpu::require_shape("batchnorm", "y", y, x.shape());
    if (m == 0 || C == 0) return;
    std::vector<float> a(C), b(C);
    for (int64_t c = 0; c < C; ++c) {
      double g = gamma.defined() ? gamma.f32()[c] : 1.0;
      double be = beta.defined() ? beta.f32()[c] : 0.0;
      double is = 1.0 / std::sqrt(double(running_var.f32()[c]) + double(p_.epsilon));
      a[c] = float(g * is);
      b[c] = float(be - double(running_mean.f32()[c]) * g * is);
    }
    affine_rows(x.f32(), a.data(), b.data(), y.f32(), m, C);
  }

  void backward(const Tensor& x, const Tensor& gamma, const Tensor& dy, const Tensor& save_mean,
                const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    int64_t C = channels(x);
    int64_t m = C ? x.numel() / C : 0;
    check_vec("gamma", gamma, C, true);
    check_vec("save_mean", save_mean, C, false);
    check_vec("save_invstd", save_invstd, C, false);
    check_vec("dgamma", dgamma, C, true);
    check_vec("dbeta", dbeta, C, true);
    cpu::require_shape("batchnorm", "dy", dy, x.shape());
    if (dx.defined()) cpu::require_shape("batchnorm", "dx", dx, x.shape());
    if (C == 0) return;
    if (m == 0) {
      if (dgamma.defined()) std::memset(dgamma.data(), 0, dgamma.bytes());
      if (dbeta.defined()) std::memset(dbeta.data(), 0, dbeta.bytes());
      return;
    }
    const float* xp = x.f32();
    const float* dyp = dy.f32();
    const float* mean = save_mean.f32();
    const float* invstd = save_invstd.f32();
    // part[c] = sum dy, part[C + c] = sum dy * (x - mean)
    const double* part = reduce_dy_dyxmu(xp, dyp, mean, m, C);
    std::vector<float> pa(C), qa(C), ra(C);
    for (int64_t c = 0; c < C; ++c) {
      double db = part[c];
      double dg = part[C + c] * double(invstd[c]);
      if (dbeta.defined()) dbeta.f32()[c] = float(db);
      if (dgamma.defined()) dgamma.f32()[c] = float(dg);
      // dx = g*is * (dy - db/m - xhat*dg/m), xhat = (x - mean)*is  =>  dx = p*dy + q*(x - mean) + r
      double g = gamma.defined() ? gamma.f32()[c] : 1.0;
      double is = invstd[c];
      double p = g * is;
      double q = -g * is * is * dg / double(m);
      pa[c] = float(p);
      qa[c] = float(q);
      ra[c] = float(-p * db / double(m));
    }
    if (!dx.defined()) return;
    float* dxp = dx.f32();
    const float* P = pa.data();
    const float* Q = qa.data();
    const float* R = ra.data();
#pragma omp parallel for schedule(static) if (m * C > cpu::kParallelGrain)
    for (int64_t r = 0; r < m; ++r) {
      const float* __restrict xr = xp + r * C;
      const float* __restrict dr = dyp + r * C;
      float* __restrict o = dxp + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = P[c] * dr[c] + Q[c] * (xr[c] - mean[c]) + R[c];
    }
  }

  // --- Synchronised batch norm pieces (see batchnorm.h).

  void channel_sums(const Tensor& x, const Tensor& shift, Tensor& sum, Tensor& sumsq) override {
    const int64_t C = channels(x), m = C ? x.numel() / C : 0;
    check_vec("shift", shift, C, true);
    check_vec("sum", sum, C, false);
    check_vec("sumsq", sumsq, C, false);
    if (C == 0) return;
    if (m == 0) {
      std::fill(sum.f32(), sum.f32() + C, 0.0f);
      std::fill(sumsq.f32(), sumsq.f32() + C, 0.0f);
      return;
    }
    const float* xp = x.f32();
    std::vector<float> zero;
    if (!shift.defined()) zero.assign(size_t(C), 0.0f);
    const float* sh = shift.defined() ? shift.f32() : zero.data();
    const double* part = reduce_rows(m, C, [&](int64_t r, float* __restrict fs, float* __restrict fq) {
      const float* __restrict xr = xp + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        float d = xr[c] - sh[c];
        fs[c] += d;
        fq[c] += d * d;
      }
    });
    for (int64_t c = 0; c < C; ++c) {
      sum.f32()[c] = float(part[c]);
      sumsq.f32()[c] = float(part[C + c]);
    }
  }

  void backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, Tensor& sum_dy,
                     Tensor& sum_dy_xmu) override {
    const int64_t C = channels(x), m = C ? x.numel() / C : 0;
    cpu::require_shape("batchnorm", "dy", dy, x.shape());
    check_vec("mean", mean, C, false);
    check_vec("sum_dy", sum_dy, C, false);
    check_vec("sum_dy_xmu", sum_dy_xmu, C, false);
    if (C == 0) return;
    if (m == 0) {
      std::fill(sum_dy.f32(), sum_dy.f32() + C, 0.0f);
      std::fill(sum_dy_xmu.f32(), sum_dy_xmu.f32() + C, 0.0f);
      return;
    }
    const double* part = reduce_dy_dyxmu(x.f32(), dy.f32(), mean.f32(), m, C);
    for (int64_t c = 0; c < C; ++c) {
      sum_dy.f32()[c] = float(part[c]);
      sum_dy_xmu.f32()[c] = float(part[C + c]);
    }
  }

  void backward_apply(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean, const Tensor& invstd,
                      const Tensor& sum_dy, const Tensor& sum_dy_xmu, double count, Tensor& dx) override {
    const int64_t C = channels(x), m = C ? x.numel() / C : 0;
    cpu::require_shape("batchnorm", "dy", dy, x.shape());
    check_vec("gamma", gamma, C, true);
    check_vec("mean", mean, C, false);
    check_vec("invstd", invstd, C, false);
    check_vec("sum_dy", sum_dy, C, false);
    check_vec("sum_dy_xmu", sum_dy_xmu, C, false);
    if (!(count > 0)) cpu::fail("batchnorm: count must be positive, got {}", count);
    if (!dx.defined()) return;
    cpu::require_shape("batchnorm", "dx", dx, x.shape());
    if (m == 0 || C == 0) return;
    // dx = p*dy + q*(x - mean) + r with p = g*is, q = -g*is^3*sum_dy_xmu/count, r = -p*sum_dy/count
    // (as in backward, whose sums and count are this batch's).
    std::vector<float> pa(C), qa(C), ra(C);
    for (int64_t c = 0; c < C; ++c) {
      double g = gamma.defined() ? gamma.f32()[c] : 1.0;
      double is = invstd.f32()[c];
      double p = g * is;
      pa[c] = float(p);
      qa[c] = float(-p * is * is * double(sum_dy_xmu.f32()[c]) / count);
      ra[c] = float(-p * double(sum_dy.f32()[c]) / count);
    }
    const float* xp = x.f32();
    const float* dyp = dy.f32();
    const float* mu = mean.f32();
    float* dxp = dx.f32();
    const float* P = pa.data();
    const float* Q = qa.data();
    const float* R = ra.data();
#pragma omp parallel for schedule(static) if (m * C > cpu::kParallelGrain)
    for (int64_t r = 0; r < m; ++r) {
      const float* __restrict xr = xp + r * C;
      const float* __restrict dr = dyp + r * C;
      float* __restrict o = dxp + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = P[c] * dr[c] + Q[c] * (xr[c] - mu[c]) + R[c];
    }
  }

 private:
  static int64_t channels(const Tensor& x) {
    cpu::require_f32("batchnorm", "x", x);
    shape_checks::require_min_rank("batchnorm", "x", x, 2);
    return x.shape().back();
  }
  static void check_vec(const char* name, const Tensor& t, int64_t C, bool optional) {
    if (optional && !t.defined()) return;
    cpu::require_shape("batchnorm", name, t, {C});
  }
  BatchNormParams p_;
};

static RegisterKernel<BatchNormKernel, CpuBatchNorm> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
