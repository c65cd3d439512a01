// Float64 references for the transformer ops: layer norm, multi-head attention.
#pragma once
#include <cstdint>
#include <vector>

#include "reference.h"

namespace trainer::ref {

// Keras LayerNormalization over the last axis of x [rows, C]: (x - mean) / sqrt(var + eps) · gamma
// + beta, var biased; gamma / beta null: 1 / 0.
Vec layer_norm_forward(const Vec& x, int64_t rows, int64_t C, const Vec* gamma, const Vec* beta, double eps);
// dx, dgamma (Σ dy·x̂ over rows) and dbeta (Σ dy), overwritten, by the chain rule written out
// element by element (not the kernels' closed form): dx_j = Σ_k dy_k·gamma_k·∂x̂_k/∂x_j.
void layer_norm_backward(const Vec& x, int64_t rows, int64_t C, const Vec* gamma, const Vec& dy, double eps, Vec& dx,
                         Vec& dgamma, Vec& dbeta);

// Scaled dot-product attention per head on q [B, T, H·Dk], k [B, S, H·Dk], v [B, S, H·Dv]:
// o [B, T, H·Dv] = softmax(q·kᵀ/√Dk, masked to j ≤ i when causal)·v. `drop` (dropout on the
// probabilities), when given: a factor per (b, h, i, j) at ((b·H + h)·T + i)·S + j multiplying p_ij.
Vec attention_forward(const Vec& q, const Vec& k, const Vec& v, int64_t B, int64_t T, int64_t S, int64_t H,
                      int64_t Dk, int64_t Dv, bool causal, const Vec* drop = nullptr);
// dq, dk, dv (overwritten) from dout, through the softmax's Jacobian row by row
// (ds_ij = Σ_l dp_il·p_il·(δ_jl - p_ij) = p_ij·(dp_ij - D_i) with D_i = Σ_l dp_il·p_il = do_i·o_i,
// dp_il the gradient of p_il through its dropout factor). `o`, when given: D_i = do_i·o_i of these
// outputs (a kernel's, stored in a low type) instead of the exact ones, as the kernels compute it.
void attention_backward(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, int64_t B, int64_t T, int64_t S,
                        int64_t H, int64_t Dk, int64_t Dv, bool causal, Vec& dq, Vec& dk, Vec& dv,
                        const Vec* drop = nullptr, const Vec* o = nullptr);

// o, dq, dk and dv of one call (the two above), in that order.
std::vector<Vec> attention_outputs(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, int64_t B, int64_t T,
                                   int64_t S, int64_t H, int64_t Dk, int64_t Dv, bool causal, const Vec* drop = nullptr);
// The kernels' dropout factors of n elements (philox.h's rule under `seed`; 1/(1 - rate) or 0).
Vec attention_dropout_mask(size_t n, float rate, uint64_t seed);
// The largest Σ_c |q_ic·k_jc| of any score: what rounding q and k moves a score by, over 2^-p.
double attention_largest_qk(const Vec& q, const Vec& k, int64_t B, int64_t T, int64_t S, int64_t H, int64_t Dk);
// Each of o, dq, dk, dv's largest error relative to its scale: its largest value, or what its
// operands make of it where that is near 0 (with one key, dq and dk are 0 exactly and rounding
// leaves values of the operands' order x ulps): max|v|·r, c·max|k|, c·max|q|, max|dout|·r with
// r = 1/(1 - rate) and c = max|dout|·max|v|·r/√Dk. A NaN in got is infinitely far.
std::vector<double> attention_errors(const std::vector<Vec>& got, const std::vector<Vec>& want, const Vec& q,
                                     const Vec& k, const Vec& v, const Vec& dout, int64_t Dk, float rate);

}  // namespace trainer::ref
