// Scaled dot-product attention arithmetic shared by the CPU and CUDA kernels: the causal mask, the row's log-sum-exp and the probabilities recomputed from it.
#pragma once
#include <math.h>

#include "core/ops/math/hd.h"

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

}  // namespace trainer::attn
