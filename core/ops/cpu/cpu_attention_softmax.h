// The CPU attention's softmax rows in AVX-512 (FastPath::AttnSoftmax): one exponential per score in forward, 16 lanes with masked tails; cpu_exp.h's rows (or libm's) are the path beside it.
#pragma once
#include <cstdint>

namespace trainer::cpu {

// Forward: row[0, keys) holds a query's scaled scores; on return, its probabilities, and the
// result is the row's log-sum-exp m + log(Σ_j e_j) (attention_math.h's lse_of). m is the largest
// score (NaNs passed over, as std::max does), e_j = exp(s_j - m) by cpu::exp_poly's algorithm in 16
// lanes (within 2 ulp; 0 below -87.3, NaN for NaN), summed in double: term j in lane j % 16, the
// lanes folded in order (the same bits wherever the row sits). p_j = e_j · (1/Σe) rounded to f32:
// within 3 ulp of exp(s_j - lse), and one exponential per score where the path beside it takes two
// (one for the sum, one for p from the rounded lse). Backward recomputes p as attn_row_exp does, a
// few ulp from forward's: both are the same probabilities to f32's precision. keys ≥ 1.
float attn_row_softmax(float* row, int64_t keys);

// row[j] = exp(row[j] - shift) for j < n, cpu::exp_poly's algorithm in 16 lanes (backward's
// probabilities from the saved log-sum-exp).
void attn_row_exp(float* row, int64_t n, float shift);

// Whether this CPU runs them (AVX-512 F).
bool attn_softmax_available();

}  // namespace trainer::cpu
