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

// attn_bf16's words (cpu_attention_pairs.h): the head's, packed once per head from the bits of its
// bf16 k and v (in their tensors, rows ldk and ldv apart) — kᵀ with pairs along Dk [⌈Dk/2⌉, St] for
// the scores; in forward v along the keys [⌈S/2⌉, Dv] for the output; in backward vᵀ [⌈Dv/2⌉, St]
// and k along the keys [⌈S/2⌉, Dk] for dP and dQ — and room for one product's A and B operands,
// packed per product.
struct Pairs {
  uint32_t *kt = nullptr, *v = nullptr, *vt = nullptr, *k = nullptr, *a = nullptr, *b = nullptr;

  // Words a thread needs for blocks of R rows.
  static int64_t words(const AttentionDims& d, int64_t R, bool backward) {
    return head_words(d, backward) + a_words(d, R) + pairs(R) * std::max(d.Dk, d.Dv);
  }
  // Carved from `w` (words(...) of them); the head's k and v packed.
  static Pairs of(uint32_t* w, const AttentionDims& d, int64_t R, bool backward, const uint16_t* k, int64_t ldk,
                  const uint16_t* v, int64_t ldv) {
    const int64_t St = transposed_ld(d.S), S2 = pairs(d.S);
    Pairs p;
    p.kt = w, w += pairs(d.Dk) * St;
    bits_in_rows_t(k, ldk, d.S, d.Dk, p.kt, St);
    if (backward) {
      p.vt = w, w += pairs(d.Dv) * St;
      p.k = w, w += S2 * d.Dk;
      bits_in_rows_t(v, ldv, d.S, d.Dv, p.vt, St);
      bits_in_cols(k, ldk, d.S, d.Dk, p.k, d.Dk);
    } else {
      p.v = w, w += S2 * d.Dv;
      bits_in_cols(v, ldv, d.S, d.Dv, p.v, d.Dv);
    }
    p.a = w, w += a_words(d, R);
    p.b = w;
    return p;
  }

 private:
  static int64_t head_words(const AttentionDims& d, bool backward) {
    const int64_t St = transposed_ld(d.S), S2 = pairs(d.S);
    return pairs(d.Dk) * St + (backward ? pairs(d.Dv) * St + S2 * d.Dk : S2 * d.Dv);
  }
  // The largest A operand: q or do rows [R, ⌈D/2⌉], p or ds rows [R, ⌈S/2⌉], or down their columns [⌈R/2⌉, S].
  static int64_t a_words(const AttentionDims& d, int64_t R) {
    return std::max({R * pairs(d.S), d.S * pairs(R), R * pairs(std::max(d.Dk, d.Dv))});
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

  // p = scale·q·kᵀ (the scale at the end, as a pass over p would)
  void scores(const float* qb, const Block& bl, float* p) const {
    by_head_t(qb, bl, kh, kt, pp ? pp->kt : nullptr, d.Dk, d.scale, p);
  }
  // o = p·v
  void out(const float* p, const Block& bl, float* ob) const { by_head(p, bl, vh, pp ? pp->v : nullptr, d.Dv, ob); }
  // dv[0, keys) += pᵀ·do
  void dv_add(const float* p, const float* gb, const Block& bl, float* dvh) const { add_t(p, gb, bl, d.Dv, dvh); }
  // dp = do·vᵀ
  void dp(const float* gb, const Block& bl, float* ds) const {
    by_head_t(gb, bl, vh, vt, pp ? pp->vt : nullptr, d.Dv, 1.0f, ds);
  }
  // dq = ds·k
  void dq(const float* ds, const Block& bl, float* dqb) const { by_head(ds, bl, kh, pp ? pp->k : nullptr, d.Dk, dqb); }
  // dk[0, keys) += dsᵀ·q
  void dk_add(const float* ds, const float* qb, const Block& bl, float* dkh) const { add_t(ds, qb, bl, d.Dk, dkh); }

 private:
  // c [n, keys] = alpha·x [n, w]·hᵀ for the head's h [S, w] (k or v; ht its transposed copy [w, St],
  // htp its words along w [⌈w/2⌉, St]).
  void by_head_t(const float* x, const Block& bl, const float* h, const float* ht, const uint32_t* htp, int64_t w,
                 float alpha, float* c) const {
    if (pp) {
      pairs_in_rows(x, w, bl.n, w, pp->a, pairs(w));
      return attn_gemm_bf16(bl.n, bl.keys, pairs(w), {pp->a, pairs(w), 1}, htp, transposed_ld(d.S), c, bl.keys, alpha,
                            false);
    }
    if (kernel) return attn_gemm(bl.n, bl.keys, w, {x, w, 1}, ht, transposed_ld(d.S), c, bl.keys, alpha, false);
    sgemm("attention", 'N', 'T', bl.n, bl.keys, w, x, w, h, w, 0.0f, c, bl.keys);
    if (alpha == 1.0f) return;
#pragma omp simd
    for (int64_t i = 0; i < bl.n * bl.keys; ++i) c[i] *= alpha;
  }
  // c [n, w] = x [n, keys]·h for the head's h [S, w] (v or k; hp its words along the keys [⌈S/2⌉, w]).
  void by_head(const float* x, const Block& bl, const float* h, const uint32_t* hp, int64_t w, float* c) const {
    if (pp) {
      pairs_in_rows(x, bl.keys, bl.n, bl.keys, pp->a, pairs(bl.keys));
      return attn_gemm_bf16(bl.n, w, pairs(bl.keys), {pp->a, pairs(bl.keys), 1}, hp, w, c, w, 1.0f, false);
    }
    if (kernel) return attn_gemm(bl.n, w, bl.keys, {x, bl.keys, 1}, h, w, c, w, 1.0f, false);
    sgemm("attention", 'N', 'N', bl.n, w, bl.keys, x, bl.keys, h, w, 0.0f, c, w);
  }
  // c [keys, w] += xᵀ·y for the block's x [n, keys] (p or ds) and y [n, w] (do or q).
  void add_t(const float* x, const float* y, const Block& bl, int64_t w, float* c) const {
    if (pp) {
      // xᵀ's word (c, j) is x's word (j, c) down its columns, read transposed.
      pairs_in_cols(x, bl.keys, bl.n, bl.keys, pp->a, bl.keys);
      pairs_in_cols(y, w, bl.n, w, pp->b, w);
      return attn_gemm_bf16(bl.keys, w, pairs(bl.n), {pp->a, 1, bl.keys}, pp->b, w, c, w, 1.0f, true);
    }
    if (kernel) return attn_gemm(bl.keys, w, bl.n, {x, 1, bl.keys}, y, w, c, w, 1.0f, true);
    sgemm("attention", 'T', 'N', bl.keys, w, bl.n, x, bl.keys, y, w, 1.0f, c, w);
  }
};

}  // namespace trainer::cpu
