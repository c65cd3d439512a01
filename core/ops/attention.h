// Attention op family: multi-head scaled dot-product attention over [batch, time, heads·dim] rows, causal or not (the core of Keras MultiHeadAttention).
#pragma once
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"
#include "core/ops/step_scalars.h"

namespace trainer {

// dropout: Keras's MultiHeadAttention(dropout), on the attention probabilities in training (a
// call given a DropoutSeed; attention_math.h).
struct AttentionParams {
  int64_t heads = 0, key_dim = 0, value_dim = 0;
  bool causal = false;
  float dropout = 0.0f;
};

// The sizes of one call: B batches, T queries, S keys, H heads of Dk (query/key) and Dv (value).
struct AttentionDims {
  int64_t B = 0, T = 0, S = 0, H = 0, Dk = 0, Dv = 0;
  bool causal = false;
  float scale = 1.0f;  // 1/√Dk
  float rate = 0.0f;   // the dropout on the probabilities in this call (0: none)
  DropoutSeed drop;    // its seed (a recorded step's read where the kernel runs)
};

class AttentionKernel {
 public:
  using Params = AttentionParams;
  static constexpr const char* kName = "attention";
  virtual ~AttentionKernel() = default;
  AttentionKernel(const AttentionKernel&) = delete;
  AttentionKernel& operator=(const AttentionKernel&) = delete;

  // q [B, T, H·Dk], k [B, S, H·Dk], v [B, S, H·Dv] (head h in columns [h·D, (h+1)·D), as the
  // projections write them) -> o [B, T, H·Dv] and lse [B, H, T], each query row's log-sum-exp of
  // its scaled scores (attention_math.h), which backward needs. lse is f32; q, k, v, o (and
  // backward's dout, dq, dk, dv) are all f32, or all of the context's low type (bf16, f16: the
  // layer computing in it, MixedPrecision::Low; scores, probabilities and sums stay f32 inside,
  // each output rounded once where it is stored). `drop` (training, with
  // the params' dropout above 0): the probabilities' dropout mask is drawn from this seed (read
  // where the kernel runs when it is a recorded step's); null: no dropout (evaluation).
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, Tensor& lse,
               const DropoutSeed* drop = nullptr) {
    const AttentionDims d = check(q, k, v, drop);
    ck_.like("o", o, q, {d.B, d.T, d.H * d.Dv});
    ck_.shape("lse", lse, {d.B, d.H, d.T});
    forward_impl(d, q, k, v, o, lse);
  }
  // dq, dk, dv (overwritten) from dout and forward's o and lse (and its `drop`: the same seed
  // redraws the same mask). Deterministic: the same bits on every call and at every thread count.
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& lse,
                const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, const DropoutSeed* drop = nullptr) {
    const AttentionDims d = check(q, k, v, drop);
    ck_.like("o", o, q, {d.B, d.T, d.H * d.Dv});
    ck_.shape("lse", lse, {d.B, d.H, d.T});
    ck_.like("dout", dout, q, o.shape());
    ck_.like("dq", dq, q, q.shape());
    ck_.like("dk", dk, q, k.shape());
    ck_.like("dv", dv, q, v.shape());
    backward_impl(d, q, k, v, o, lse, dout, dq, dk, dv);
  }

 protected:
  AttentionKernel(const OpContext& c, const Params& p) : p_(p), low_(low_dtype(c.precision())), ck_(kName, c.device()) {
    if (p.heads <= 0 || p.key_dim <= 0 || p.value_dim <= 0)
      ck_.fail("heads, key_dim and value_dim must be positive, got ", p.heads, ", ", p.key_dim, " and ", p.value_dim);
    if (!(p.dropout >= 0.0f && p.dropout < 1.0f)) ck_.fail("dropout must be in [0, 1), got ", p.dropout);
  }
  // Called with checked arguments only.
  virtual void forward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o,
                            Tensor& lse) = 0;
  virtual void backward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                             const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) = 0;

  const Params p_;
  const DType low_;  // the context's low type (F32 under fp32)
  shape_checks::Checks ck_;

 private:
  AttentionDims check(const Tensor& q, const Tensor& k, const Tensor& v, const DropoutSeed* drop) const {
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}}) {
      ck_.dtype(name, *t, t == &q ? (q.dtype() == low_ ? low_ : DType::F32) : q.dtype());
      ck_.has_rank(name, *t, 3);
    }
    AttentionDims d;
    d.B = q.dim(0), d.T = q.dim(1), d.S = k.dim(1), d.H = p_.heads, d.Dk = p_.key_dim, d.Dv = p_.value_dim;
    d.causal = p_.causal;
    d.scale = float(1.0 / std::sqrt(double(d.Dk)));
    if (drop && p_.dropout > 0.0f) d.drop = *drop, d.rate = p_.dropout;
    if (q.dim(2) != d.H * d.Dk) ck_.fail("q has shape [", q.shape().str(), "], expected a last axis of ", d.H * d.Dk);
    if (k.shape() != Shape{d.B, d.S, d.H * d.Dk})
      ck_.fail("k has shape [", k.shape().str(), "], expected [", d.B, "x", d.S, "x", d.H * d.Dk, "]");
    if (v.shape() != Shape{d.B, d.S, d.H * d.Dv})
      ck_.fail("v has shape [", v.shape().str(), "], expected [", d.B, "x", d.S, "x", d.H * d.Dv, "]");
    if (d.S == 0 && d.T > 0) ck_.fail("no keys: a query needs at least one key to attend to");
    return d;
  }
};

}  // namespace trainer
