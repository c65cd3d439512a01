// Attention as batched GEMMs (llm.c's cuBLAS attention): the GEMM calls of each chunk of (batch, head) pairs in cuBLAS's column-major terms, and the pairs' indexing, shared by the CUDA path and the host test that runs them through a column-major reference GEMM.
#pragma once
#include <cstdint>
#include <vector>

#include "core/ops/math/hd.h"

// The CUDA attention's fast path (FastPath::AttnGemm) computes, for each (b, h), the scores as one
// GEMM into a buffer of T·S floats, the row work (mask, log-sum-exp, probabilities, dropout;
// backward: the score gradients) in a kernel of one block per row, and the rest as GEMMs:
//   forward   Sc = scale·Q·Kᵀ;  P = rows(Sc) (lse saved);  O = P·V
//   backward  Sc = scale·Q·Kᵀ;  dP = dO·Vᵀ;  (P·m, dS) = rows(Sc, dP, lse, D = dO·O);
//             dV = (P·m)ᵀ·dO;  dQ = dS·K;  dK = dSᵀ·Q         (dS = scale·P∘(dP·m − D))
// (attention_math.h's formulas; nothing of size T·S is kept between forward and backward). The
// pairs run in chunks whose score buffers fit a budget, so the scratch is bounded: the chunk
// loop runs over the smaller of B and H, the GEMMs are strided batches over the other.
//
// Row-major [rows, cols] buffers are cuBLAS's column-major cols x rows matrices (leading dimension
// cols). Q_bh is rows b·T.. of q [B, T, H·Dk] at column h·Dk: row-major T x Dk with row stride H·Dk
// (column-major Dk x T, ld H·Dk); likewise K_bh (S x Dk), V_bh (S x Dv), O_bh (T x Dv). A chunk's
// score rows are its pairs' T x S matrices one after another (column-major S x T, ld S).

namespace trainer::attn_gemm {

// The buffers a GEMM reads or writes. Scores and DProbs are the f32 results of the score GEMMs;
// Probs and DScores are what the rows kernel writes for the GEMMs that follow (the same buffers as
// Scores and DProbs in f32, their copies in the low type under mixed precision).
enum class Buf { Q, K, V, O, dO, dQ, dK, dV, Scores, Probs, DProbs, DScores };

struct Operand {
  Buf buf;
  int64_t offset = 0;  // elements
  int64_t ld = 0;      // the column-major leading dimension
  int64_t stride = 0;  // elements between consecutive matrices of the batch
};

// C = alpha·op(A)·op(B) + beta·C for each of `batch` matrices (cuBLAS's strided batched GEMM:
// op(A) m x k, op(B) k x n, C m x n, column-major; ta/tb: op is the transpose).
struct Gemm {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  Operand a, b;
  float beta = 0.0f;
  Operand c;
  int64_t batch = 0;
};

// One call's sizes (attention.h's AttentionDims, less what the GEMMs do not need).
struct Dims {
  int64_t B = 0, T = 0, S = 0, H = 0, Dk = 0, Dv = 0;
  float scale = 1.0f;
};

// A chunk: pairs (b = outer, h = first..first+count-1) when over_heads, else (b = first..,
// h = outer). Element e of the chunk is the pair's score matrix e.
struct Chunk {
  int64_t outer = 0, first = 0, count = 0;
  bool over_heads = true;
};

// The flat pair index b·H + h of chunk element e (lse rows, dropout elements).
TRAINER_HD_INLINE int64_t pair_of(const Chunk& c, int64_t H, int64_t e) {
  return c.over_heads ? c.outer * H + c.first + e : (c.first + e) * H + c.outer;
}

// The chunks of a call whose score buffers hold at most `budget` floats (at least one pair each).
inline std::vector<Chunk> chunks(const Dims& d, int64_t budget) {
  std::vector<Chunk> out;
  if (d.B == 0 || d.T == 0 || d.H == 0) return out;
  const bool over_heads = d.B <= d.H;  // loop over the smaller axis, batch the larger
  const int64_t outer = over_heads ? d.B : d.H, inner = over_heads ? d.H : d.B;
  const int64_t per = d.T * d.S > 0 ? budget / (d.T * d.S) : inner;
  const int64_t step = per < 1 ? 1 : per > inner ? inner : per;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t f = 0; f < inner; f += step) out.push_back({o, f, f + step < inner ? step : inner - f, over_heads});
  return out;
}

// The first matrix and the stride of a [B, rows, H·D] tensor's (b, h) blocks in chunk c.
inline Operand heads_of(const Dims& d, const Chunk& c, Buf buf, int64_t rows, int64_t D) {
  const int64_t ld = d.H * D;
  if (c.over_heads) return {buf, c.outer * rows * ld + c.first * D, ld, D};
  return {buf, c.first * rows * ld + c.outer * D, ld, rows * ld};
}

// The chunk's score-sized buffer: count matrices of T x S.
inline Operand scores_of(const Dims& d, Buf buf) { return {buf, 0, d.S, d.T * d.S}; }

// Sc (S x T column-major) = scale · K_bh (op T: Dk x S stored) · Q_bh (Dk x T).
inline Gemm scores(const Dims& d, const Chunk& c) {
  return {true, false, d.S, d.T, d.Dk, d.scale, heads_of(d, c, Buf::K, d.S, d.Dk), heads_of(d, c, Buf::Q, d.T, d.Dk),
          0.0f, scores_of(d, Buf::Scores), c.count};
}

// O (Dv x T) = V_bh (Dv x S) · P (S x T).
inline Gemm output(const Dims& d, const Chunk& c) {
  return {false, false, d.Dv, d.T, d.S, 1.0f, heads_of(d, c, Buf::V, d.S, d.Dv), scores_of(d, Buf::Probs), 0.0f,
          heads_of(d, c, Buf::O, d.T, d.Dv), c.count};
}

// dP (S x T) = V_bh (op T: Dv x S stored) · dO_bh (Dv x T).
inline Gemm dprobs(const Dims& d, const Chunk& c) {
  return {true, false, d.S, d.T, d.Dv, 1.0f, heads_of(d, c, Buf::V, d.S, d.Dv), heads_of(d, c, Buf::dO, d.T, d.Dv),
          0.0f, scores_of(d, Buf::DProbs), c.count};
}

// dV (Dv x S) = dO_bh (Dv x T) · P·m (op T: S x T stored).
inline Gemm dvalues(const Dims& d, const Chunk& c) {
  return {false, true, d.Dv, d.S, d.T, 1.0f, heads_of(d, c, Buf::dO, d.T, d.Dv), scores_of(d, Buf::Probs), 0.0f,
          heads_of(d, c, Buf::dV, d.S, d.Dv), c.count};
}

// dQ (Dk x T) = K_bh (Dk x S) · dS (S x T).
inline Gemm dqueries(const Dims& d, const Chunk& c) {
  return {false, false, d.Dk, d.T, d.S, 1.0f, heads_of(d, c, Buf::K, d.S, d.Dk), scores_of(d, Buf::DScores), 0.0f,
          heads_of(d, c, Buf::dQ, d.T, d.Dk), c.count};
}

// dK (Dk x S) = Q_bh (Dk x T) · dS (op T: S x T stored).
inline Gemm dkeys(const Dims& d, const Chunk& c) {
  return {false, true, d.Dk, d.S, d.T, 1.0f, heads_of(d, c, Buf::Q, d.T, d.Dk), scores_of(d, Buf::DScores), 0.0f,
          heads_of(d, c, Buf::dK, d.S, d.Dk), c.count};
}

// The rows (stored, column-major) of an operand: op N reads rows x cols = m x k (A) or k x n (B).
// cuBLAS refuses a leading dimension below max(1, rows).
inline bool valid(const Gemm& g) {
  const int64_t ra = g.ta ? g.k : g.m, rb = g.tb ? g.n : g.k;
  return g.a.ld >= (ra > 1 ? ra : 1) && g.b.ld >= (rb > 1 ? rb : 1) && g.c.ld >= (g.m > 1 ? g.m : 1) && g.batch >= 1;
}

}  // namespace trainer::attn_gemm
