// CPU attention: one (batch, head) per thread, its scores [T, S] in the thread's scratch, the products through sgemm; backward recomputes the probabilities (and any dropout mask) from the saved log-sum-exp (and seed).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/attention.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/attention_math.h"

namespace trainer {
namespace {

// One (b, h): its rows are strided by H·D in the [B, T, H·D] tensors.
struct Head {
  const float *q, *k, *v;
  int64_t ldk, ldv;  // H·Dk, H·Dv
};

Head head_of(const AttentionDims& d, const float* q, const float* k, const float* v, int64_t b, int64_t h) {
  const int64_t ldk = d.H * d.Dk, ldv = d.H * d.Dv;
  return {q + b * d.T * ldk + h * d.Dk, k + b * d.S * ldk + h * d.Dk, v + b * d.S * ldv + h * d.Dv, ldk, ldv};
}

// p [T, S] = the probabilities of (b, h): the scaled scores, then exp(s - lse) where visible, 0
// elsewhere. With `lse_out` the row's log-sum-exp is computed (forward) and written; otherwise it is
// read from `lse_in` (backward).
void probabilities(const AttentionDims& d, const Head& hd, float* p, float* lse_out, const float* lse_in) {
  cpu::sgemm("attention", 'N', 'T', d.T, d.S, d.Dk, hd.q, hd.ldk, hd.k, hd.ldk, 0.0f, p, d.S);
  for (int64_t i = 0; i < d.T; ++i) {
    float* row = p + i * d.S;
    const int64_t keys = attn::visible_keys(i, d.S, d.causal);
    for (int64_t j = 0; j < keys; ++j) row[j] *= d.scale;
    float lse;
    if (lse_out) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < keys; ++j) m = std::max(m, row[j]);
      double sum = 0;
      for (int64_t j = 0; j < keys; ++j) sum += double(std::exp(row[j] - m));
      lse = lse_out[i] = attn::lse_of(m, sum);
    } else {
      lse = lse_in[i];
    }
    for (int64_t j = 0; j < keys; ++j) row[j] = attn::prob(row[j], lse);
    std::fill(row + keys, row + d.S, 0.0f);
  }
}

// row[0, n) *= m of elements e0, e0 + 1, ... (attention_math.h's drop_factor, one Philox draw per
// four elements).
void drop_row(const attn::Drop& drop, uint64_t e0, float* row, int64_t n) {
  for (int64_t j = 0; j < n;) {
    const uint64_t e = e0 + uint64_t(j);
    const Philox4 r = dropout_words(e / 4, drop.seed);
    for (uint64_t w = e % 4; w < 4 && j < n; ++w, ++j) row[j] *= dropout_keep(r.v[w], drop.threshold) ? drop.scale : 0.0f;
  }
}

attn::Drop drop_of(const AttentionDims& d) {
  const uint64_t seed = d.drop.step ? node_seed(d.drop.step->seed(), d.drop.value) : d.drop.value;
  return attn::make_drop(d.rate, seed);
}

// The first element of (b·H + h)'s row i in the [B, H, T, S] numbering of the dropout mask.
uint64_t row_element(const AttentionDims& d, int64_t bh, int64_t i) { return (uint64_t(bh) * uint64_t(d.T) + uint64_t(i)) * uint64_t(d.S); }

class CpuAttention final : public AttentionKernel {
 public:
  CpuAttention(OpContext& ctx, const AttentionParams& p) : AttentionKernel(ctx, p), ctx_(ctx) {}

 private:
  // Each (b, h) is one thread's, and sgemm inside the parallel region runs on that thread alone:
  // the results do not depend on the thread count. (The region is entered even for one pair.)
  void forward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o,
                    Tensor& lse) override {
    const int64_t pairs = d.B * d.H;
    if (pairs == 0 || d.T == 0) return;
    float* scratch = scratch_.as<float>(ctx_, size_t(omp_get_max_threads()) * size_t(d.T * d.S));
    const float *qp = q.f32(), *kp = k.f32(), *vp = v.f32();
    float *op = o.f32(), *lp = lse.f32();
    const attn::Drop drop = drop_of(d);
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      float* p = scratch + size_t(omp_get_thread_num()) * size_t(d.T * d.S);
      const Head hd = head_of(d, qp, kp, vp, b, h);
      probabilities(d, hd, p, lp + bh * d.T, nullptr);
      if (drop.on)
        for (int64_t i = 0; i < d.T; ++i)
          drop_row(drop, row_element(d, bh, i), p + i * d.S, attn::visible_keys(i, d.S, d.causal));
      cpu::sgemm("attention", 'N', 'N', d.T, d.Dv, d.S, p, d.S, hd.v, hd.ldv, 0.0f,
                 op + b * d.T * hd.ldv + h * d.Dv, hd.ldv);
    }
  }

  void backward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                     const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override {
    const int64_t pairs = d.B * d.H;
    if (pairs == 0 || d.T == 0) {  // no queries: nothing reaches the keys
      std::fill(dk.f32(), dk.f32() + dk.numel(), 0.0f);
      std::fill(dv.f32(), dv.f32() + dv.numel(), 0.0f);
      return;
    }
    const size_t per = size_t(2 * d.T * d.S + d.T);
    float* scratch = scratch_.as<float>(ctx_, size_t(omp_get_max_threads()) * per);
    const float *qp = q.f32(), *kp = k.f32(), *vp = v.f32(), *opp = o.f32(), *lp = lse.f32(), *gp = dout.f32();
    float *dqp = dq.f32(), *dkp = dk.f32(), *dvp = dv.f32();
    const attn::Drop drop = drop_of(d);
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      float* p = scratch + size_t(omp_get_thread_num()) * per;
      float* ds = p + d.T * d.S;
      float* D = ds + d.T * d.S;
      const Head hd = head_of(d, qp, kp, vp, b, h);
      const int64_t ov = b * d.T * hd.ldv + h * d.Dv, oq = b * d.T * hd.ldk + h * d.Dk;
      const int64_t kv_k = b * d.S * hd.ldk + h * d.Dk, kv_v = b * d.S * hd.ldv + h * d.Dv;
      probabilities(d, hd, p, nullptr, lp + bh * d.T);
      // dv = (p·m)ᵀ·do (p·m in ds for the while); dp = (do·vᵀ)·m (into ds)
      const float* pm = p;
      if (drop.on) {
        std::copy(p, p + d.T * d.S, ds);
        for (int64_t i = 0; i < d.T; ++i)
          drop_row(drop, row_element(d, bh, i), ds + i * d.S, attn::visible_keys(i, d.S, d.causal));
        pm = ds;
      }
      cpu::sgemm("attention", 'T', 'N', d.S, d.Dv, d.T, pm, d.S, gp + ov, hd.ldv, 0.0f, dvp + kv_v, hd.ldv);
      cpu::sgemm("attention", 'N', 'T', d.T, d.S, d.Dv, gp + ov, hd.ldv, hd.v, hd.ldv, 0.0f, ds, d.S);
      if (drop.on)
        for (int64_t i = 0; i < d.T; ++i)
          drop_row(drop, row_element(d, bh, i), ds + i * d.S, attn::visible_keys(i, d.S, d.causal));
      for (int64_t i = 0; i < d.T; ++i) {
        double acc = 0;
        for (int64_t c = 0; c < d.Dv; ++c) acc += double(gp[ov + i * hd.ldv + c]) * double(opp[ov + i * hd.ldv + c]);
        D[i] = float(acc);
      }
      // ds = scale·p·(dp - D): the scale of dq and dk folded in once
      for (int64_t i = 0; i < d.T; ++i)
        for (int64_t j = 0; j < d.S; ++j)
          ds[i * d.S + j] = d.scale * attn::score_grad(p[i * d.S + j], ds[i * d.S + j], D[i]);
      cpu::sgemm("attention", 'N', 'N', d.T, d.Dk, d.S, ds, d.S, hd.k, hd.ldk, 0.0f, dqp + oq, hd.ldk);
      cpu::sgemm("attention", 'T', 'N', d.S, d.Dk, d.T, ds, d.S, hd.q, hd.ldk, 0.0f, dkp + kv_k, hd.ldk);
    }
  }

  OpContext& ctx_;
  Scratch scratch_;  // per thread: the probabilities [T, S], the score gradients [T, S], D [T]
};

static RegisterKernel<AttentionKernel, CpuAttention> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
