// The CPU attention's softmax rows in AVX-512 (FastPath::AttnSoftmax): one exponential per score in forward, 16 lanes with masked tails; cpu_exp.h's rows (or libm's) are the path beside it.
#pragma once
#include <cstdint>

namespace trainer::cpu {

// Forward: row[0, keys) holds a query's scaled scores; on return, its probabilities, and the
// result is the row's log-sum-exp m + log(Σ_j e_j) (attention_math.h's lse_of). m is the largest
// score (NaNs passed over, as std::max does), e_j = exp(s_j - m) by cpu::exp_poly's algorithm in 16
// lanes (within 2 ulp down to -87.3, denormals below as libm's, 0 below -103.9; NaN for NaN), summed
// in double: term j in lane j % 16, the lanes folded by a fixed tree (the same bits wherever the
// row sits). p_j = e_j · (1/Σe) rounded to f32:
// within 3 ulp of exp(s_j - lse), and one exponential per score where the path beside it takes two
// (one for the sum, one for p from the rounded lse). Backward recomputes p as attn_row_exp does, a
// few ulp from forward's: both are the same probabilities to f32's precision. keys ≥ 1.
float attn_row_softmax(float* row, int64_t keys);

// The keys row r of a block sees: min(first + r·step, cap) (causal: step 1; else step 0, first = cap).
struct RowKeys {
  int64_t first, step, cap;
  int64_t of(int64_t r) const { return first + r * step < cap ? first + r * step : cap; }
};
// attn_row_softmax on n rows ld apart (row r's keys: keys.of(r)), each row's log-sum-exp in lse[r]:
// the same bits as row by row.
void attn_rows_softmax(float* p, int64_t ld, int64_t n, RowKeys keys, float* lse);

// row[j] = exp(row[j] - shift) for j < n, cpu::exp_poly's algorithm in 16 lanes (backward's
// probabilities from the saved log-sum-exp).
void attn_row_exp(float* row, int64_t n, float shift);

// Whether this CPU runs them (AVX-512 F).
bool attn_softmax_available();

}  // namespace trainer::cpu
