// The six products of the CPU attention for one (batch, head) on its thread: oneDNN's sgemm (the reference), our f32 micro-kernel (attn_kernel), or for bf16 tensors its AVX512_BF16 form on bf16 pairs (attn_bf16); the blocks of query rows they work on.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/ops/attention.h"
#include "core/ops/cpu/cpu_attention_gemm.h"
#include "core/ops/cpu/cpu_attention_pairs.h"
#include "core/ops/cpu/cpu_util.h"
#include "core/ops/math/attention_math.h"

namespace trainer::cpu {

// A block of query rows [i0, i0 + n) and the keys [0, keys) any of them sees.
struct Block {
  int64_t i0, n, keys;
};

inline Block block_of(const AttentionDims& d, int64_t i0, int64_t rows) {
  const int64_t n = std::min(rows, d.T - i0);
  return {i0, n, attn::visible_keys(i0 + n - 1, d.S, d.causal)};
}

// The row stride of the transposed keys and values: S plus 16, so that a column of B read down
// its rows does not map every row to one cache set (at S = 1024 the 4 KiB stride did: 64 queries
// against 1024 keys ran at 209 GFLOP/s on one thread, 250 padded).
inline int64_t transposed_ld(int64_t S) { return S + 16; }

// attn_bf16's words (cpu_attention_pairs.h): the head's, packed once per head — kᵀ with pairs
// along Dk [⌈Dk/2⌉, St], v along the keys [⌈S/2⌉, Dv]; in backward also vᵀ [⌈Dv/2⌉, St] and k along
// the keys [⌈S/2⌉, Dk] — and room for one product's A and B operands, packed per product.
struct Pairs {
  uint32_t *kt, *v, *vt, *k, *a, *b;

  // Words a thread needs for blocks of R rows (backward: all six).
  static int64_t words(const AttentionDims& d, int64_t R, bool backward) {
    const int64_t St = transposed_ld(d.S), S2 = pairs(d.S), R2 = pairs(R);
    const int64_t head = pairs(d.Dk) * St + S2 * d.Dv + (backward ? pairs(d.Dv) * St + S2 * d.Dk : 0);
    const int64_t a = std::max({R * S2, d.S * R2, R * pairs(std::max(d.Dk, d.Dv))});
    return head + a + R2 * std::max(d.Dk, d.Dv);
  }
  // Carved from `w` (words(...) of them); the head's k and v (f32 [S, D] scratch) packed.
  static Pairs of(uint32_t* w, const AttentionDims& d, int64_t R, bool backward, const float* kh, const float* vh) {
    const int64_t St = transposed_ld(d.S), S2 = pairs(d.S);
    Pairs p{};
    p.kt = w, w += pairs(d.Dk) * St;
    p.v = w, w += S2 * d.Dv;
    pairs_in_rows_t(kh, d.Dk, d.S, d.Dk, p.kt, St);
    pairs_in_cols(vh, d.Dv, d.S, d.Dv, p.v, d.Dv);
    if (backward) {
      p.vt = w, w += pairs(d.Dv) * St;
      p.k = w, w += S2 * d.Dk;
      pairs_in_rows_t(vh, d.Dv, d.S, d.Dv, p.vt, St);
      pairs_in_cols(kh, d.Dk, d.S, d.Dk, p.k, d.Dk);
    }
    p.a = w, w += std::max({R * S2, d.S * pairs(R), R * pairs(std::max(d.Dk, d.Dv))});
    p.b = w;
    return p;
  }
};

// Every operand is the thread's contiguous scratch: q, do, dq blocks [n, D], p and ds [n, keys] of
// row stride `keys`, the head's k, v, dk, dv [S, D]; the f32 micro-kernel reads the keys and values
// transposed (kt, vt [D, St]) where they are a product's right operand. With `pp` (bf16 tensors
// and attn_bf16) the products run on bf16 words: q, k, v and do are bf16 values already (exact);
// the probabilities and score gradients are rounded to bf16 where they multiply (as cuDNN's fused
// attention rounds them), accumulation in f32.
struct Products {
  const AttentionDims& d;
  bool kernel;
  const float *kh, *vh, *kt, *vt;
  const Pairs* pp = nullptr;

  // p = scale·q·kᵀ (the scale at the end, as a pass over p would).
  void scores(const float* qb, const Block& bl, float* p) const {
    if (pp) {
      pairs_in_rows(qb, d.Dk, bl.n, d.Dk, pp->a, pairs(d.Dk));
      return attn_gemm_bf16(bl.n, bl.keys, pairs(d.Dk), pp->a, pairs(d.Dk), pp->kt, transposed_ld(d.S), p, bl.keys,
                            d.scale, false);
    }
    if (kernel) return attn_gemm(bl.n, bl.keys, d.Dk, {qb, d.Dk, 1}, kt, transposed_ld(d.S), p, bl.keys, d.scale, false);
    sgemm("attention", 'N', 'T', bl.n, bl.keys, d.Dk, qb, d.Dk, kh, d.Dk, 0.0f, p, bl.keys);
#pragma omp simd
    for (int64_t i = 0; i < bl.n * bl.keys; ++i) p[i] *= d.scale;
  }
  // o = p·v
  void out(const float* p, const Block& bl, float* ob) const {
    if (pp) {
      pairs_in_rows(p, bl.keys, bl.n, bl.keys, pp->a, pairs(bl.keys));
      return attn_gemm_bf16(bl.n, d.Dv, pairs(bl.keys), pp->a, pairs(bl.keys), pp->v, d.Dv, ob, d.Dv, 1.0f, false);
    }
    if (kernel) return attn_gemm(bl.n, d.Dv, bl.keys, {p, bl.keys, 1}, vh, d.Dv, ob, d.Dv, 1.0f, false);
    sgemm("attention", 'N', 'N', bl.n, d.Dv, bl.keys, p, bl.keys, vh, d.Dv, 0.0f, ob, d.Dv);
  }
  // dv[0, keys) += pᵀ·do
  void dv_add(const float* p, const float* gb, const Block& bl, float* dvh) const {
    if (pp) {
      pairs_in_cols_t(p, bl.keys, bl.n, bl.keys, pp->a, pairs(bl.n));
      pairs_in_cols(gb, d.Dv, bl.n, d.Dv, pp->b, d.Dv);
      return attn_gemm_bf16(bl.keys, d.Dv, pairs(bl.n), pp->a, pairs(bl.n), pp->b, d.Dv, dvh, d.Dv, 1.0f, true);
    }
    if (kernel) return attn_gemm(bl.keys, d.Dv, bl.n, {p, 1, bl.keys}, gb, d.Dv, dvh, d.Dv, 1.0f, true);
    sgemm("attention", 'T', 'N', bl.keys, d.Dv, bl.n, p, bl.keys, gb, d.Dv, 1.0f, dvh, d.Dv);
  }
  // dp = do·vᵀ
  void dp(const float* gb, const Block& bl, float* ds) const {
    if (pp) {
      pairs_in_rows(gb, d.Dv, bl.n, d.Dv, pp->a, pairs(d.Dv));
      return attn_gemm_bf16(bl.n, bl.keys, pairs(d.Dv), pp->a, pairs(d.Dv), pp->vt, transposed_ld(d.S), ds, bl.keys,
                            1.0f, false);
    }
    if (kernel) return attn_gemm(bl.n, bl.keys, d.Dv, {gb, d.Dv, 1}, vt, transposed_ld(d.S), ds, bl.keys, 1.0f, false);
    sgemm("attention", 'N', 'T', bl.n, bl.keys, d.Dv, gb, d.Dv, vh, d.Dv, 0.0f, ds, bl.keys);
  }
  // dq = ds·k
  void dq(const float* ds, const Block& bl, float* dqb) const {
    if (pp) {
      pairs_in_rows(ds, bl.keys, bl.n, bl.keys, pp->a, pairs(bl.keys));
      return attn_gemm_bf16(bl.n, d.Dk, pairs(bl.keys), pp->a, pairs(bl.keys), pp->k, d.Dk, dqb, d.Dk, 1.0f, false);
    }
    if (kernel) return attn_gemm(bl.n, d.Dk, bl.keys, {ds, bl.keys, 1}, kh, d.Dk, dqb, d.Dk, 1.0f, false);
    sgemm("attention", 'N', 'N', bl.n, d.Dk, bl.keys, ds, bl.keys, kh, d.Dk, 0.0f, dqb, d.Dk);
  }
  // dk[0, keys) += dsᵀ·q
  void dk_add(const float* ds, const float* qb, const Block& bl, float* dkh) const {
    if (pp) {
      pairs_in_cols_t(ds, bl.keys, bl.n, bl.keys, pp->a, pairs(bl.n));
      pairs_in_cols(qb, d.Dk, bl.n, d.Dk, pp->b, d.Dk);
      return attn_gemm_bf16(bl.keys, d.Dk, pairs(bl.n), pp->a, pairs(bl.n), pp->b, d.Dk, dkh, d.Dk, 1.0f, true);
    }
    if (kernel) return attn_gemm(bl.keys, d.Dk, bl.n, {ds, 1, bl.keys}, qb, d.Dk, dkh, d.Dk, 1.0f, true);
    sgemm("attention", 'T', 'N', bl.keys, d.Dk, bl.n, ds, bl.keys, qb, d.Dk, 1.0f, dkh, d.Dk);
  }
};

}  // namespace trainer::cpu
