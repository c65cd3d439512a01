// Scaled dot-product attention arithmetic shared by the CPU and CUDA kernels: the causal mask, the row's log-sum-exp and the probabilities recomputed from it.
#pragma once
#include <math.h>

#include "core/ops/math/hd.h"
#include "core/ops/math/philox.h"

// For each batch b and head h, with q_i the query rows [T, Dk], k_j and v_j the key and value rows
// [S, Dk] and [S, Dv] (Keras MultiHeadAttention's core, _compute_attention):
//   s_ij = scale·q_i·k_j (scale = 1/√Dk),  visible: j ≤ i when causal (Keras's causal mask: the
//   lower triangle of [T, S]), every j otherwise
//   lse_i = m_i + log Σ_visible exp(s_ij - m_i), m_i the row's largest score (the sum in double)
//   p_ij = exp(s_ij - lse_i) where visible, else 0;  o_i = Σ_j p_ij·v_j
// Backward (the probabilities recomputed from q, k and the saved lse; nothing of size T·S kept):
//   D_i = do_i·o_i,  dp_ij = do_i·v_j,  ds_ij = p_ij·(dp_ij - D_i)
//   dq_i = scale·Σ_j ds_ij·k_j,  dk_j = scale·Σ_i ds_ij·q_i,  dv_j = Σ_i p_ij·do_i
// Every row sees at least key 0, so no row is empty (S ≥ 1).
// Dropout on the probabilities (Keras MultiHeadAttention(dropout), in training): m_ij = 1/(1-rate)
// or 0 by the dropout rule (philox.h) of element ((b·H + h)·T + i)·S + j under the step's seed;
//   o_i = Σ_j p_ij·m_ij·v_j;  dv_j = Σ_i p_ij·m_ij·do_i;  dp_ij = m_ij·(do_i·v_j);  ds_ij as above,
//   with D_i = do_i·o_i unchanged (Σ_j p_ij·dp_ij = Σ_j p_ij·m_ij·do_i·v_j = do_i·o_i). The mask is
//   recomputed from the seed in backward: nothing of size T·S is kept.

namespace trainer::attn {

// Keys [0, visible_keys) are visible to query row i.
TRAINER_HD_INLINE int64_t visible_keys(int64_t i, int64_t S, bool causal) {
  return causal ? (i + 1 < S ? i + 1 : S) : S;
}

// lse from the row's largest score and Σ exp(s - m).
TRAINER_HD_INLINE float lse_of(float m, double sum_exp) { return m + float(log(sum_exp)); }

TRAINER_HD_INLINE float prob(float s, float lse) { return expf(s - lse); }

// ds_ij from p_ij, dp_ij and the row's D_i.
TRAINER_HD_INLINE float score_grad(float p, float dp, float D) { return p * (dp - D); }

// A dropout's draw: the threshold and factor of its rate (rate 0: nothing dropped), and the seed.
struct Drop {
  uint32_t threshold = 0;
  float scale = 1.0f;
  uint64_t seed = 0;
  bool on = false;
};

TRAINER_HD_INLINE Drop make_drop(float rate, uint64_t seed) {
  Drop d;
  d.on = rate > 0.0f;
  d.threshold = dropout_threshold(rate);
  d.scale = dropout_scale(rate);
  d.seed = seed;
  return d;
}

// The dropout element of (b·H + h = bh, i, j) in a call of T queries and S keys.
TRAINER_HD_INLINE uint64_t element(int64_t bh, int64_t i, int64_t j, int64_t T, int64_t S) {
  return (uint64_t(bh) * uint64_t(T) + uint64_t(i)) * uint64_t(S) + uint64_t(j);
}

// m_ij of element e = ((b·H + h)·T + i)·S + j: drop.scale when kept, else 0 (1 without dropout).
TRAINER_HD_INLINE float drop_factor(const Drop& drop, uint64_t e) {
  if (!drop.on) return 1.0f;
  const Philox4 r = dropout_words(e / 4, drop.seed);
  return dropout_keep(r.v[e % 4], drop.threshold) ? drop.scale : 0.0f;
}

}  // namespace trainer::attn
