// CPU attention: one (batch, head) per thread, its query rows in blocks (each block's scores against the keys it sees in the thread's scratch), the products through sgemm, the exponentials vectorised; backward recomputes the probabilities (and any dropout mask) from the saved log-sum-exp (and seed).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/attention.h"
#include "core/ops/cpu/cpu_exp.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/attention_math.h"

namespace trainer {
namespace {

// Query rows per block on the attn_blocks fast path: a block's scores against 1024 keys are 256 KiB
// (a core's L2), and a causal block computes only the keys its last row sees, so the masked upper
// triangle (half of a long sequence's products) is mostly skipped. Without it one block holds every
// row against every visible key (the whole [T, S] scores at once).
constexpr int64_t kRowBlock = 64;

// One (b, h): its rows are strided by H·D in the [B, T, H·D] tensors.
struct Head {
  const float *q, *k, *v;
  int64_t ldk, ldv;  // H·Dk, H·Dv
};

Head head_of(const AttentionDims& d, const float* q, const float* k, const float* v, int64_t b, int64_t h) {
  const int64_t ldk = d.H * d.Dk, ldv = d.H * d.Dv;
  return {q + b * d.T * ldk + h * d.Dk, k + b * d.S * ldk + h * d.Dk, v + b * d.S * ldv + h * d.Dv, ldk, ldv};
}

// A block of query rows [i0, i0 + n) and the keys [0, keys) any of them sees.
struct Block {
  int64_t i0, n, keys;
};

Block block_of(const AttentionDims& d, int64_t i0, int64_t rows) {
  const int64_t n = std::min(rows, d.T - i0);
  return {i0, n, attn::visible_keys(i0 + n - 1, d.S, d.causal)};
}

// One row's log-sum-exp over its `keys` scaled scores (attention_math.h: the largest, then the sum
// of exp(s - m) in double), and the row turned into exp(s - lse): libm's expf, summed in
// order (the reference), or with kPoly cpu::exp_poly, vectorised with the sum in lanes (softmax_exp).
template <bool kPoly>
float row_lse(const float* row, int64_t keys) {
  float m = -std::numeric_limits<float>::infinity();
  double sum = 0;
  if constexpr (kPoly) {
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < keys; ++j) m = std::max(m, row[j]);
    sum = cpu::sum_exp_poly(row, keys, m);
  } else {
    for (int64_t j = 0; j < keys; ++j) m = std::max(m, row[j]);
    for (int64_t j = 0; j < keys; ++j) sum += double(std::exp(row[j] - m));
  }
  return attn::lse_of(m, sum);
}

template <bool kPoly>
void row_probabilities(float* row, int64_t keys, float lse) {
  if constexpr (kPoly) {
#pragma omp simd
    for (int64_t j = 0; j < keys; ++j) row[j] = cpu::exp_poly(row[j] - lse);
  } else {
    for (int64_t j = 0; j < keys; ++j) row[j] = attn::prob(row[j], lse);
  }
}

// p [n, keys] = the block's probabilities: the scaled scores, then exp(s - lse) where visible, 0
// elsewhere. With `lse_out` each row's log-sum-exp is computed (forward) and written; otherwise it
// is read from `lse_in` (backward). Both indexed by the block's rows. `poly`: the softmax_exp path.
void probabilities(const AttentionDims& d, const Head& hd, const Block& bl, float* p, float* lse_out,
                   const float* lse_in, bool poly) {
  cpu::sgemm("attention", 'N', 'T', bl.n, bl.keys, d.Dk, hd.q + bl.i0 * hd.ldk, hd.ldk, hd.k, hd.ldk, 0.0f, p, bl.keys);
  for (int64_t r = 0; r < bl.n; ++r) {
    float* row = p + r * bl.keys;
    const int64_t keys = attn::visible_keys(bl.i0 + r, d.S, d.causal);
#pragma omp simd
    for (int64_t j = 0; j < keys; ++j) row[j] *= d.scale;
    float lse = lse_in ? lse_in[r] : 0.0f;
    if (lse_out) lse = lse_out[r] = poly ? row_lse<true>(row, keys) : row_lse<false>(row, keys);
    if (poly) row_probabilities<true>(row, keys, lse);
    else row_probabilities<false>(row, keys, lse);
    std::fill(row + keys, row + bl.keys, 0.0f);
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

// The block's rows of p (or dp) times their dropout factors: element ((b·H + h)·T + i)·S + j.
void drop_block(const AttentionDims& d, const attn::Drop& drop, int64_t bh, const Block& bl, float* p) {
  for (int64_t r = 0; r < bl.n; ++r) {
    const int64_t i = bl.i0 + r;
    drop_row(drop, (uint64_t(bh) * uint64_t(d.T) + uint64_t(i)) * uint64_t(d.S), p + r * bl.keys,
             attn::visible_keys(i, d.S, d.causal));
  }
}

class CpuAttention final : public AttentionKernel {
 public:
  CpuAttention(OpContext& ctx, const AttentionParams& p)
      : AttentionKernel(ctx, p), ctx_(ctx), blocks_(ctx.fast_paths().has(FastPath::AttnBlocks)),
        poly_(ctx.fast_paths().has(FastPath::SoftmaxExp)) {}

 private:
  int64_t rows_per_block(const AttentionDims& d) const { return blocks_ ? std::min(kRowBlock, d.T) : d.T; }

  // Each (b, h) is one thread's, and sgemm inside the parallel region runs on that thread alone:
  // the results do not depend on the thread count. (The region is entered even for one pair.)
  void forward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o,
                    Tensor& lse) override {
    const int64_t pairs = d.B * d.H;
    if (pairs == 0 || d.T == 0) return;
    const int64_t R = rows_per_block(d);
    float* scratch = scratch_.as<float>(ctx_, size_t(omp_get_max_threads()) * size_t(R * d.S));
    const float *qp = q.f32(), *kp = k.f32(), *vp = v.f32();
    float *op = o.f32(), *lp = lse.f32();
    const attn::Drop drop = drop_of(d);
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      float* p = scratch + size_t(omp_get_thread_num()) * size_t(R * d.S);
      const Head hd = head_of(d, qp, kp, vp, b, h);
      for (int64_t i0 = 0; i0 < d.T; i0 += R) {
        const Block bl = block_of(d, i0, R);
        probabilities(d, hd, bl, p, lp + bh * d.T + i0, nullptr, poly_);
        if (drop.on) drop_block(d, drop, bh, bl, p);
        cpu::sgemm("attention", 'N', 'N', bl.n, d.Dv, bl.keys, p, bl.keys, hd.v, hd.ldv, 0.0f,
                   op + (b * d.T + i0) * hd.ldv + h * d.Dv, hd.ldv);
      }
    }
  }

  // Per block: dv[0, keys) += (p·m)ᵀ·do; dp = (do·vᵀ)·m; ds = scale·p·(dp - D); dq = ds·k;
  // dk[0, keys) += dsᵀ·q (dk and dv zeroed first, then summed over the blocks in order).
  void backward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                     const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override {
    const int64_t pairs = d.B * d.H;
    if (pairs == 0 || d.T == 0) {  // no queries: nothing reaches the keys
      std::fill(dk.f32(), dk.f32() + dk.numel(), 0.0f);
      std::fill(dv.f32(), dv.f32() + dv.numel(), 0.0f);
      return;
    }
    const int64_t R = rows_per_block(d);
    const size_t per = size_t(2 * R * d.S + R);
    float* scratch = scratch_.as<float>(ctx_, size_t(omp_get_max_threads()) * per);
    const float *qp = q.f32(), *kp = k.f32(), *vp = v.f32(), *opp = o.f32(), *lp = lse.f32(), *gp = dout.f32();
    float *dqp = dq.f32(), *dkp = dk.f32(), *dvp = dv.f32();
    const attn::Drop drop = drop_of(d);
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      float* p = scratch + size_t(omp_get_thread_num()) * per;
      float* ds = p + R * d.S;
      float* D = ds + R * d.S;
      const Head hd = head_of(d, qp, kp, vp, b, h);
      const int64_t ov = b * d.T * hd.ldv + h * d.Dv, oq = b * d.T * hd.ldk + h * d.Dk;
      float* dkh = dkp + b * d.S * hd.ldk + h * d.Dk;
      float* dvh = dvp + b * d.S * hd.ldv + h * d.Dv;
      for (int64_t j = 0; j < d.S; ++j) {
        std::fill(dkh + j * hd.ldk, dkh + j * hd.ldk + d.Dk, 0.0f);
        std::fill(dvh + j * hd.ldv, dvh + j * hd.ldv + d.Dv, 0.0f);
      }
      for (int64_t i0 = 0; i0 < d.T; i0 += R) {
        const Block bl = block_of(d, i0, R);
        const float* go = gp + ov + i0 * hd.ldv;
        const float* qb = hd.q + i0 * hd.ldk;
        probabilities(d, hd, bl, p, nullptr, lp + bh * d.T + i0, poly_);
        // dv += (p·m)ᵀ·do (p·m in ds for the while); dp = (do·vᵀ)·m (into ds)
        const float* pm = p;
        if (drop.on) {
          std::copy(p, p + bl.n * bl.keys, ds);
          drop_block(d, drop, bh, bl, ds);
          pm = ds;
        }
        cpu::sgemm("attention", 'T', 'N', bl.keys, d.Dv, bl.n, pm, bl.keys, go, hd.ldv, 1.0f, dvh, hd.ldv);
        cpu::sgemm("attention", 'N', 'T', bl.n, bl.keys, d.Dv, go, hd.ldv, hd.v, hd.ldv, 0.0f, ds, bl.keys);
        if (drop.on) drop_block(d, drop, bh, bl, ds);
        for (int64_t r = 0; r < bl.n; ++r) {
          double acc = 0;
          const float* orow = opp + ov + (i0 + r) * hd.ldv;
          for (int64_t c = 0; c < d.Dv; ++c) acc += double(go[r * hd.ldv + c]) * double(orow[c]);
          D[r] = float(acc);
        }
        // ds = scale·p·(dp - D): the scale of dq and dk folded in once
        for (int64_t r = 0; r < bl.n; ++r)
          for (int64_t j = 0; j < bl.keys; ++j)
            ds[r * bl.keys + j] = d.scale * attn::score_grad(p[r * bl.keys + j], ds[r * bl.keys + j], D[r]);
        cpu::sgemm("attention", 'N', 'N', bl.n, d.Dk, bl.keys, ds, bl.keys, hd.k, hd.ldk, 0.0f, dqp + oq + i0 * hd.ldk,
                   hd.ldk);
        cpu::sgemm("attention", 'T', 'N', bl.keys, d.Dk, bl.n, ds, bl.keys, qb, hd.ldk, 1.0f, dkh, hd.ldk);
      }
    }
  }

  OpContext& ctx_;
  const bool blocks_;  // FastPath::AttnBlocks
  const bool poly_;    // FastPath::SoftmaxExp
  Scratch scratch_;    // per thread: a block's probabilities and score gradients [rows, S], D [rows]
};

static RegisterKernel<AttentionKernel, CpuAttention> reg(DeviceKind::CPU);

}  // namespace
}  // namespace trainer
