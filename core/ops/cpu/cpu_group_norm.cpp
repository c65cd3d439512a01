// CPU group norm: (sample, group) rows in parallel, each a layer-norm row spread over the positions (layernorm_math.h); gamma's and beta's gradients as fixed blocks of samples added in block order (the same bits at any thread count).
#include <algorithm>

#include "core/ops/cpu/cpu_util.h"
#include "core/ops/group_norm.h"

namespace trainer {
namespace {

using ln::RowStats;

// Group (n, g)'s statistics: two passes in double over x - shift, shift its first element.
RowStats group_stats(const gn::Shape3& s, const float* x, int64_t n, int64_t g, float eps) {
  const int64_t M = s.group_size(), cg = s.per_group();
  if (M == 0) return {0.0f, 0.0f, ln::rstd_of(0.0, 1, eps)};  // no positions: nothing to normalise
  const float* base = x + n * s.P * s.C + g * cg;
  const float shift = base[0];
  double sum = 0;
  for (int64_t p = 0; p < s.P; ++p)
    for (int64_t j = 0; j < cg; ++j) sum += double(base[p * s.C + j] - shift);
  const float mean = float(sum / double(M));
  double q = 0;
  for (int64_t p = 0; p < s.P; ++p)
    for (int64_t j = 0; j < cg; ++j) {
      const double d = double((base[p * s.C + j] - shift) - mean);
      q += d * d;
    }
  return {shift, mean, ln::rstd_of(q, M, eps)};
}

// Samples per block of the parameter gradients' partial sums: a function of the shape alone (at
// least 64 Ki elements a block, at most 256 blocks).
int64_t samples_per_block(const gn::Shape3& s) {
  const int64_t per_sample = std::max<int64_t>(1, s.P * s.C);
  return std::max<int64_t>({1, (int64_t(1) << 16) / per_sample, (s.N + 255) / 256});
}

class CpuGroupNorm final : public GroupNormKernel {
 public:
  CpuGroupNorm(OpContext& ctx, const GroupNormParams& p) : GroupNormKernel(ctx, p), ctx_(ctx) {}

 private:
  void forward_impl(const gn::Shape3& s, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                    Tensor& stats) override {
    const float* xp = x.f32();
    const float* gp = gamma.defined() ? gamma.f32() : nullptr;
    const float* bp = beta.defined() ? beta.f32() : nullptr;
    float* yp = y.f32();
    float* st = stats.f32();
    const int64_t cg = s.per_group();
    const float eps = p_.epsilon;
#pragma omp parallel for schedule(static) if (x.numel() > cpu::kParallelGrain)
    for (int64_t r = 0; r < s.N * s.G; ++r) {
      const int64_t n = r / s.G, g = r % s.G;
      const RowStats rs = group_stats(s, xp, n, g, eps);
      st[3 * r] = rs.shift, st[3 * r + 1] = rs.mean, st[3 * r + 2] = rs.rstd;
      for (int64_t p = 0; p < s.P; ++p) {
        const int64_t o = (n * s.P + p) * s.C + g * cg;
        for (int64_t j = 0; j < cg; ++j) {
          const int64_t c = g * cg + j;
          yp[o + j] = ln::forward(xp[o + j], rs, gp ? gp[c] : 1.0f, bp ? bp[c] : 0.0f);
        }
      }
    }
  }

  void backward_impl(const gn::Shape3& s, const Tensor& x, const Tensor& gamma, const Tensor& dy, const Tensor& stats,
                     Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    const float* xp = x.f32();
    const float* gp = gamma.defined() ? gamma.f32() : nullptr;
    const float* dyp = dy.f32();
    const float* st = stats.f32();
    const int64_t cg = s.per_group(), M = s.group_size();
    auto row = [&](int64_t r) { return RowStats{st[3 * r], st[3 * r + 1], st[3 * r + 2]}; };
    if (dx.defined()) {
      float* dxp = dx.f32();
#pragma omp parallel for schedule(static) if (x.numel() > cpu::kParallelGrain)
      for (int64_t r = 0; r < s.N * s.G; ++r) {
        const int64_t n = r / s.G, g = r % s.G;
        const RowStats rs = row(r);
        double sg = 0, sgx = 0;
        for (int64_t m = 0; m < M; ++m) {
          const int64_t o = s.at(n, g, m), c = g * cg + m % cg;
          const float gv = dyp[o] * (gp ? gp[c] : 1.0f);
          sg += double(gv);
          sgx += double(gv) * double(ln::normalise(xp[o], rs));
        }
        const float mg = float(sg / double(M)), mgx = float(sgx / double(M));
        for (int64_t m = 0; m < M; ++m) {
          const int64_t o = s.at(n, g, m), c = g * cg + m % cg;
          dxp[o] = ln::input_grad(dyp[o] * (gp ? gp[c] : 1.0f), ln::normalise(xp[o], rs), mg, mgx, rs.rstd);
        }
      }
    }
    if (!dgamma.defined() && !dbeta.defined()) return;
    const int64_t per = samples_per_block(s), blocks = (s.N + per - 1) / per, C = s.C;
    // Block b's partials: Σ dy·x̂ in part[b·2C .. +C), Σ dy in part[b·2C + C .. +C).
    double* part = partials_.as<double>(ctx_, size_t(std::max<int64_t>(blocks, 1) * 2 * C));
#pragma omp parallel for schedule(static) if (blocks > 1 && x.numel() > cpu::kParallelGrain)
    for (int64_t b = 0; b < blocks; ++b) {
      double* pg = part + b * 2 * C;
      double* pb = pg + C;
      std::fill(pg, pg + 2 * C, 0.0);
      for (int64_t n = b * per; n < std::min(s.N, (b + 1) * per); ++n)
        for (int64_t p = 0; p < s.P; ++p)
          for (int64_t c = 0; c < C; ++c) {
            const int64_t o = (n * s.P + p) * C + c;
            pg[c] += double(dyp[o]) * double(ln::normalise(xp[o], row(n * s.G + c / cg)));
            pb[c] += double(dyp[o]);
          }
    }
    float* dgp = dgamma.defined() ? dgamma.f32() : nullptr;
    float* dbp = dbeta.defined() ? dbeta.f32() : nullptr;
    for (int64_t c = 0; c < C; ++c) {
      double sg = 0, sb = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        sg += part[b * 2 * C + c];
        sb += part[b * 2 * C + C + c];
      }
      if (dgp) dgp[c] = float(sg);
      if (dbp) dbp[c] = float(sb);
    }
  }

  OpContext& ctx_;
  Scratch partials_;
};

static RegisterKernel<GroupNormKernel, CpuGroupNorm> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
