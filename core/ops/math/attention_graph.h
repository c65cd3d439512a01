// Attention as cuDNN operation graphs (the fused flash-attention engines' pattern): every tensor's type, dims and strides and every operation, as data, shared by the CUDA path that hands them to cuDNN and the host test that evaluates them.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ops/attention.h"

// cuDNN 9 runs scaled dot-product attention as one fused kernel when it is given the operations of
// the pattern its flash-attention engines recognise (what cudnn-frontend's sdpa nodes emit): the
// scores as a matmul, the scale, the causal mask, the softmax written out as reductions and
// pointwise operations, the second matmul. This header builds those graphs for one call's sizes
// (AttentionDims) as plain data; core/ops/cuda/cudnn_graph.cpp turns them into backend
// descriptors, tests/unit/ops/attention_graph_test.cpp evaluates them in double on the host
// against the float64 reference. The formulas are attention_math.h's:
//   forward   S = scale·Q·Kᵀ, masked (key j visible to query i when j ≤ i, causal);
//             stats = max_j S + log Σ_j exp(S − max) (the log-sum-exp: our lse); P = exp(S − max)/Σ;
//             O = P·V, P rounded to the low type as the matmul's operand
//   backward  D = rowsum(dO∘O) (the "softmax sum", written to a buffer of its own);
//             P = exp(S − stats) (recomputed); dV = Pᵀ·dO; dP = dO·Vᵀ; dS = scale·P∘(dP − D);
//             dQ = dS·K; dK = dSᵀ·Q
// Q, K, V, O and their gradients are the layer's [B, T, H·D] rows seen as [B, H, T, D] (strides
// T·H·D, D, H·D, 1), in the low type (bf16/f16: the engines take no f32 operands); the stats are
// [B, H, T, 1] f32, our lse [B, H, T]. Without dropout (the fast path refuses a call with it).

namespace trainer::attn_graph {

enum class Type : uint8_t { F32, Low, I32, Bool };  // Low: the context's bf16 or f16

enum class Op : uint8_t {
  Matmul,                               // y = x·b over the last two axes, batched over the others
  Mul, Add, Sub, Div, Exp, Log,         // pointwise, operands broadcast over their size-1 axes
  GenIndex,                             // y = the element's index along `axis`
  CmpGe,                                // y = x >= b (Bool)
  Select,                               // y = t ? x : b (cuDNN's BINARY_SELECT)
  ReduceMax, ReduceAdd,                 // y = x reduced over the axes where y has size 1
  Reshape,                              // y = x's elements read through y's dims and strides (a transpose)
};

// The variant pack's tensors (uids); intermediates (virtual) take uids from kVirtual on.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kMaskFill, kDO, kDQ, kDK, kDV, kOne, kSoftmaxSum,
  kVirtual = 100,
};

struct Tensor {
  std::string name;
  int64_t uid = 0;
  Type type = Type::F32;
  std::array<int64_t, 4> dims{}, strides{};
  bool is_virtual = false;
  bool by_value = false;  // a host scalar (the scale, the mask's fill value)
};

struct Node {
  Op op = Op::Mul;
  int x = -1, b = -1, t = -1, y = -1;  // tensor indices (b, t: -1 when the op takes none)
  int64_t axis = -1;                   // GenIndex's
};

struct Graph {
  std::vector<Tensor> tensors;
  std::vector<Node> nodes;  // in the order they run
};

// The mask's fill value for hidden keys (uid kMaskFill): the lowest float (finite: exp(fill − max)
// is 0 with no infinity in the arithmetic).
constexpr float kFillValue = -3.4028234663852886e38f;

namespace detail {

class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}
  int tensor(std::string name, int64_t uid, Type t, std::array<int64_t, 4> dims, std::array<int64_t, 4> strides,
             bool is_virtual = false, bool by_value = false) {
    g_.tensors.push_back({std::move(name), uid, t, dims, strides, is_virtual, by_value});
    return int(g_.tensors.size()) - 1;
  }
  // A virtual tensor of the given shape, contiguous (row-major) unless strides are given.
  int temp(std::string name, Type t, std::array<int64_t, 4> dims) {
    return tensor(std::move(name), next_++, t, dims, packed(dims), true);
  }
  int temp(std::string name, Type t, std::array<int64_t, 4> dims, std::array<int64_t, 4> strides) {
    return tensor(std::move(name), next_++, t, dims, strides, true);
  }
  int scalar(std::string name, int64_t uid) {
    return tensor(std::move(name), uid, Type::F32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }
  void node(Op op, int x, int b, int y, int t = -1, int64_t axis = -1) { g_.nodes.push_back({op, x, b, t, y, axis}); }
  static std::array<int64_t, 4> packed(std::array<int64_t, 4> d) {
    return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
  }

 private:
  Graph& g_;
  int64_t next_ = kVirtual;
};

// The layer's [B, T, H·D] rows as [B, H, T, D]; `transposed`: as [B, H, D, T] (the same memory).
inline std::array<int64_t, 4> rows_strides(int64_t T, int64_t H, int64_t D, bool transposed = false) {
  return transposed ? std::array<int64_t, 4>{T * H * D, D, 1, H * D} : std::array<int64_t, 4>{T * H * D, D, H * D, 1};
}

// S = scale·Q·Kᵀ (less the stats when `stats` is given: the backward's log-probabilities), then the
// causal mask: returns the masked scores (f32, virtual). `scale`: the scale's tensor.
inline int scores(Builder& g, const AttentionDims& d, int q, int kt, int scale, int stats = -1) {
  const std::array<int64_t, 4> sd{d.B, d.H, d.T, d.S};
  const int s = g.temp("S", Type::F32, sd);
  g.node(Op::Matmul, q, kt, s);
  int scaled = g.temp("S·scale", Type::F32, sd);
  g.node(Op::Mul, s, scale, scaled);
  if (stats >= 0) {
    const int shifted = g.temp("S·scale − stats", Type::F32, sd);
    g.node(Op::Sub, scaled, stats, shifted);
    scaled = shifted;
  }
  if (!d.causal) return scaled;
  const int row = g.temp("row", Type::I32, sd), col = g.temp("col", Type::I32, sd);
  g.node(Op::GenIndex, scaled, -1, row, -1, 2);
  g.node(Op::GenIndex, scaled, -1, col, -1, 3);
  const int visible = g.temp("visible", Type::Bool, sd);
  g.node(Op::CmpGe, row, col, visible);
  const int fill = g.scalar("mask fill", kMaskFill);
  const int masked = g.temp("S masked", Type::F32, sd);
  g.node(Op::Select, scaled, fill, masked, visible);
  return masked;
}

}  // namespace detail

// The forward graph: O and the stats from Q, K, V (inputs), the scale and the mask's fill value
// (by value).
inline Graph forward(const AttentionDims& d) {
  using detail::rows_strides;
  Graph out;
  detail::Builder g(out);
  const int q = g.tensor("Q", kQ, Type::Low, {d.B, d.H, d.T, d.Dk}, rows_strides(d.T, d.H, d.Dk));
  const int kt = g.tensor("Kᵀ", kK, Type::Low, {d.B, d.H, d.Dk, d.S}, rows_strides(d.S, d.H, d.Dk, true));
  const int v = g.tensor("V", kV, Type::Low, {d.B, d.H, d.S, d.Dv}, rows_strides(d.S, d.H, d.Dv));
  const int o = g.tensor("O", kO, Type::Low, {d.B, d.H, d.T, d.Dv}, rows_strides(d.T, d.H, d.Dv));
  const std::array<int64_t, 4> sd{d.B, d.H, d.T, d.S}, rd{d.B, d.H, d.T, 1};
  const int stats = g.tensor("stats", kStats, Type::F32, rd, detail::Builder::packed(rd));
  const int s = detail::scores(g, d, q, kt, g.scalar("scale", kScale));
  const int max = g.temp("max", Type::F32, rd);
  g.node(Op::ReduceMax, s, -1, max);
  const int shifted = g.temp("S − max", Type::F32, sd), e = g.temp("exp", Type::F32, sd);
  g.node(Op::Sub, s, max, shifted);
  g.node(Op::Exp, shifted, -1, e);
  const int sum = g.temp("sum", Type::F32, rd), log = g.temp("log sum", Type::F32, rd);
  g.node(Op::ReduceAdd, e, -1, sum);
  g.node(Op::Log, sum, -1, log);
  g.node(Op::Add, max, log, stats);
  const int p = g.temp("P", Type::Low, sd);
  g.node(Op::Div, e, sum, p);
  g.node(Op::Matmul, p, v, o);
  return out;
}

// The backward graph: dQ, dK, dV from Q, K, V, O, the stats and dO (inputs), the scale, the mask's
// fill value and a 1 (by value), with the softmax sum D written to a buffer of its own (kSoftmaxSum,
// [B, H, T, 1] f32). dQ is written by its matmul directly (no f32 accumulator that thread blocks
// add into): the graph cuDNN runs with its deterministic algorithm.
inline Graph backward(const AttentionDims& d) {
  using detail::Builder;
  using detail::rows_strides;
  Graph out;
  Builder g(out);
  const int q = g.tensor("Q", kQ, Type::Low, {d.B, d.H, d.T, d.Dk}, rows_strides(d.T, d.H, d.Dk));
  const int kt = g.tensor("Kᵀ", kK, Type::Low, {d.B, d.H, d.Dk, d.S}, rows_strides(d.S, d.H, d.Dk, true));
  const int vt = g.tensor("Vᵀ", kV, Type::Low, {d.B, d.H, d.Dv, d.S}, rows_strides(d.S, d.H, d.Dv, true));
  const int o = g.tensor("O", kO, Type::Low, {d.B, d.H, d.T, d.Dv}, rows_strides(d.T, d.H, d.Dv));
  const int dout = g.tensor("dO", kDO, Type::Low, {d.B, d.H, d.T, d.Dv}, rows_strides(d.T, d.H, d.Dv));
  const int dq = g.tensor("dQ", kDQ, Type::Low, {d.B, d.H, d.T, d.Dk}, rows_strides(d.T, d.H, d.Dk));
  const int dk = g.tensor("dK", kDK, Type::Low, {d.B, d.H, d.S, d.Dk}, rows_strides(d.S, d.H, d.Dk));
  const int dv = g.tensor("dV", kDV, Type::Low, {d.B, d.H, d.S, d.Dv}, rows_strides(d.S, d.H, d.Dv));
  const std::array<int64_t, 4> sd{d.B, d.H, d.T, d.S}, rd{d.B, d.H, d.T, 1}, od{d.B, d.H, d.T, d.Dv};
  const int stats = g.tensor("stats", kStats, Type::F32, rd, Builder::packed(rd));
  const int sum = g.tensor("softmax sum", kSoftmaxSum, Type::F32, rd, Builder::packed(rd));
  const int scale = g.scalar("scale", kScale), one = g.scalar("one", kOne);
  // D = rowsum(dO∘O)
  const int prod = g.temp("dO·O", Type::F32, od), rows = g.temp("rowsum dO·O", Type::F32, rd);
  g.node(Op::Mul, dout, o, prod);
  g.node(Op::ReduceAdd, prod, -1, rows);
  g.node(Op::Mul, rows, one, sum);
  // P = exp(scale·Q·Kᵀ − stats), masked; dV = Pᵀ·dO
  const int logp = detail::scores(g, d, q, kt, scale, stats);
  const int p = g.temp("P", Type::F32, sd);
  g.node(Op::Exp, logp, -1, p);
  const std::array<int64_t, 4> td{d.B, d.H, d.S, d.T}, ts{d.H * d.T * d.S, d.T * d.S, 1, d.S};  // [.., T, S]ᵀ
  const int pt = g.temp("Pᵀ", Type::Low, td, ts);
  g.node(Op::Reshape, p, -1, pt);
  g.node(Op::Matmul, pt, dout, dv);
  // dS = scale·P∘(dO·Vᵀ − D)
  const int dp = g.temp("dP", Type::F32, sd), centred = g.temp("dP − D", Type::F32, sd);
  g.node(Op::Matmul, dout, vt, dp);
  g.node(Op::Sub, dp, sum, centred);
  const int pdp = g.temp("P·(dP − D)", Type::F32, sd), ds = g.temp("dS", Type::F32, sd);
  g.node(Op::Mul, centred, p, pdp);
  g.node(Op::Mul, pdp, scale, ds);
  // dK = dSᵀ·Q; dQ = dS·K (K: the Kᵀ buffer read as [B, H, S, Dk])
  const int dst = g.temp("dSᵀ", Type::Low, td, ts);
  g.node(Op::Reshape, ds, -1, dst);
  g.node(Op::Matmul, dst, q, dk);
  const int k = g.temp("K", Type::F32, {d.B, d.H, d.S, d.Dk}, rows_strides(d.S, d.H, d.Dk));
  g.node(Op::Reshape, kt, -1, k);
  g.node(Op::Matmul, ds, k, dq);
  return out;
}

}  // namespace trainer::attn_graph
