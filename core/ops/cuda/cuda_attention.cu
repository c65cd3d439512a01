// CUDA attention: the reference path of one block per query row (forward, dq) and per key row (dk, dv), the scores (and any dropout mask) recomputed in chunks of 256, no atomics; the attn_gemm and attn_cudnn fast paths beside it (cuda_attention_gemm.cu, cuda_attention_cudnn.cu).
#include <optional>

#include "core/ops/attention.h"
#include "core/ops/cuda/cuda_attention_cudnn.h"
#include "core/ops/cuda/cuda_attention_gemm.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/math/attention_math.h"

namespace trainer {
namespace {

using cuda::block_max;
using cuda::block_sum;

constexpr int kThreads = 256;  // also the most Dk and Dv (one column per thread) and the chunk of keys

// The rows of head h of batch b in [B, rows, H·D], and their stride.
struct Rows {
  const float* p;
  int64_t ld;
  __device__ __forceinline__ const float* row(int64_t r) const { return p + r * ld; }
};

using cuda::attention_drop;

// The dropout mask's element of (b·H + h, i, j).
__device__ __forceinline__ uint64_t element(const AttentionDims& d, int64_t bh, int64_t i, int64_t j) {
  return attn::element(bh, i, j, d.T, d.S);
}

// a·b over n in one thread, in index order (every kernel computes a score the same way).
__device__ __forceinline__ float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t c = 0; c < n; ++c) s = fmaf(a[c], b[c], s);
  return s;
}

// Block (b·H + h)·T + i: query row i. o_i and lse_i (attention_math.h).
__global__ void attention_fwd_kernel(const float* q, const float* k, const float* v, float* o, float* lse,
                                     AttentionDims d) {
  __shared__ float qs[kThreads], ps[kThreads];
  const int64_t i = blockIdx.x % d.T, bh = blockIdx.x / d.T, b = bh / d.H, h = bh % d.H;
  const Rows Q{q + b * d.T * d.H * d.Dk + h * d.Dk, d.H * d.Dk}, K{k + b * d.S * d.H * d.Dk + h * d.Dk, d.H * d.Dk};
  const Rows V{v + b * d.S * d.H * d.Dv + h * d.Dv, d.H * d.Dv};
  const int t = threadIdx.x;
  if (t < d.Dk) qs[t] = Q.row(i)[t];
  __syncthreads();
  const int64_t keys = attn::visible_keys(i, d.S, d.causal);
  float m = -INFINITY;
  for (int64_t j = t; j < keys; j += kThreads) m = fmaxf(m, d.scale * dot(qs, K.row(j), d.Dk));
  m = block_max(m);
  double sum = 0.0;
  for (int64_t j = t; j < keys; j += kThreads) sum += double(expf(d.scale * dot(qs, K.row(j), d.Dk) - m));
  const float l = attn::lse_of(m, block_sum(sum));
  const attn::Drop drop = attention_drop(d);
  float acc = 0.0f;
  for (int64_t j0 = 0; j0 < keys; j0 += kThreads) {
    const int64_t j = j0 + t;
    ps[t] = j < keys ? attn::prob(d.scale * dot(qs, K.row(j), d.Dk), l) * attn::drop_factor(drop, element(d, bh, i, j))
                     : 0.0f;
    __syncthreads();
    const int64_t n = keys - j0 < kThreads ? keys - j0 : kThreads;
    if (t < d.Dv)
      for (int64_t jj = 0; jj < n; ++jj) acc = fmaf(ps[jj], V.row(j0 + jj)[t], acc);
    __syncthreads();
  }
  if (t < d.Dv) o[(b * d.T + i) * d.H * d.Dv + h * d.Dv + t] = acc;
  if (t == 0) lse[bh * d.T + i] = l;
}

// Block (b·H + h)·T + i: dq_i, and D_i = do_i·o_i into Dbuf for the key rows' kernel.
__global__ void attention_bwd_rows_kernel(const float* q, const float* k, const float* v, const float* o,
                                          const float* lse, const float* dout, float* dq, float* Dbuf, AttentionDims d) {
  __shared__ float qs[kThreads], gs[kThreads], ds[kThreads];
  const int64_t i = blockIdx.x % d.T, bh = blockIdx.x / d.T, b = bh / d.H, h = bh % d.H;
  const int64_t ldk = d.H * d.Dk, ldv = d.H * d.Dv;
  const Rows K{k + b * d.S * ldk + h * d.Dk, ldk}, V{v + b * d.S * ldv + h * d.Dv, ldv};
  const float* qi = q + (b * d.T + i) * ldk + h * d.Dk;
  const float* gi = dout + (b * d.T + i) * ldv + h * d.Dv;
  const float* oi = o + (b * d.T + i) * ldv + h * d.Dv;
  const int t = threadIdx.x;
  if (t < d.Dk) qs[t] = qi[t];
  if (t < d.Dv) gs[t] = gi[t];
  const float D = float(block_sum(t < d.Dv ? double(gi[t]) * double(oi[t]) : 0.0));  // syncs qs, gs too
  const float l = lse[bh * d.T + i];
  const int64_t keys = attn::visible_keys(i, d.S, d.causal);
  const attn::Drop drop = attention_drop(d);
  float acc = 0.0f;
  for (int64_t j0 = 0; j0 < keys; j0 += kThreads) {
    const int64_t j = j0 + t;
    if (j < keys) {
      const float p = attn::prob(d.scale * dot(qs, K.row(j), d.Dk), l);
      const float dp = dot(gs, V.row(j), d.Dv) * attn::drop_factor(drop, element(d, bh, i, j));
      ds[t] = d.scale * attn::score_grad(p, dp, D);
    }
    __syncthreads();
    const int64_t n = keys - j0 < kThreads ? keys - j0 : kThreads;
    if (t < d.Dk)
      for (int64_t jj = 0; jj < n; ++jj) acc = fmaf(ds[jj], K.row(j0 + jj)[t], acc);
    __syncthreads();
  }
  if (t < d.Dk) dq[(b * d.T + i) * ldk + h * d.Dk + t] = acc;
  if (t == 0) Dbuf[bh * d.T + i] = D;
}

// Block (b·H + h)·S + j: dk_j and dv_j over the query rows that see key j, in row order.
__global__ void attention_bwd_keys_kernel(const float* q, const float* k, const float* v, const float* lse,
                                          const float* dout, const float* Dbuf, float* dk, float* dv, AttentionDims d) {
  __shared__ float ks[kThreads], vs[kThreads], ps[kThreads], dss[kThreads];
  const int64_t j = blockIdx.x % d.S, bh = blockIdx.x / d.S, b = bh / d.H, h = bh % d.H;
  const int64_t ldk = d.H * d.Dk, ldv = d.H * d.Dv;
  const Rows Q{q + b * d.T * ldk + h * d.Dk, ldk}, G{dout + b * d.T * ldv + h * d.Dv, ldv};
  const int t = threadIdx.x;
  if (t < d.Dk) ks[t] = k[(b * d.S + j) * ldk + h * d.Dk + t];
  if (t < d.Dv) vs[t] = v[(b * d.S + j) * ldv + h * d.Dv + t];
  __syncthreads();
  const int64_t first = d.causal ? j : 0;  // rows i < j do not see key j when causal
  const attn::Drop drop = attention_drop(d);
  float acc_k = 0.0f, acc_v = 0.0f;
  for (int64_t i0 = first; i0 < d.T; i0 += kThreads) {
    const int64_t i = i0 + t;
    if (i < d.T) {
      const float p = attn::prob(d.scale * dot(Q.row(i), ks, d.Dk), lse[bh * d.T + i]);
      const float f = attn::drop_factor(drop, element(d, bh, i, j));
      ps[t] = p * f;
      dss[t] = d.scale * attn::score_grad(p, dot(G.row(i), vs, d.Dv) * f, Dbuf[bh * d.T + i]);
    }
    __syncthreads();
    const int64_t n = d.T - i0 < kThreads ? d.T - i0 : kThreads;
    for (int64_t ii = 0; ii < n; ++ii) {
      if (t < d.Dv) acc_v = fmaf(ps[ii], G.row(i0 + ii)[t], acc_v);
      if (t < d.Dk) acc_k = fmaf(dss[ii], Q.row(i0 + ii)[t], acc_k);
    }
    __syncthreads();
  }
  if (t < d.Dk) dk[(b * d.S + j) * ldk + h * d.Dk + t] = acc_k;
  if (t < d.Dv) dv[(b * d.S + j) * ldv + h * d.Dv + t] = acc_v;
}

class CudaAttention final : public AttentionKernel {
 public:
  CudaAttention(OpContext& ctx, const AttentionParams& p) : AttentionKernel(ctx, p), c_(cuda_context(ctx)) {
    const DType low = low_dtype(ctx.precision());
    if (ctx.fast_paths().has(FastPath::AttnCudnn) && low != DType::F32) cudnn_.emplace(c_, low);
    // The calls cuDNN does not take go to the batched GEMMs whenever cuDNN is on (fast_paths.h: "else
    // attn_gemm"), attn_gemm off included: they round q and k to the low type as cuDNN does, so a
    // backward that falls back (one query and one key, key counts cuDNN < 9.16 refuses, a refused
    // plan) pairs cuDNN's forward log-sum-exp with scores of the same operands — the reference
    // kernel's f32 scores would be off by the operands' rounding.
    if (ctx.fast_paths().has(FastPath::AttnGemm) || cudnn_) gemm_.emplace(c_, low);
    else if (p.key_dim > kThreads || p.value_dim > kThreads)
      ck_.fail("key_dim and value_dim above ", kThreads, " are not supported by the CUDA kernel's reference path "
               "(attn_gemm off; got ", p.key_dim, " and ", p.value_dim, ")");
  }

 private:
  void forward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o,
                    Tensor& lse) override {
    if (cudnn_ && cudnn_->forward(d, q, k, v, o, lse)) return;
    if (q.dtype() == DType::F32) return forward_f32(d, q.f32(), k.f32(), v.f32(), o.f32(), lse.f32());
    // Low tensors on the paths below compute from their f32 values (exact), the outputs rounded once.
    float* wo = wide_[kWo].as<float>(c_, size_t(o.numel()));
    forward_f32(d, widen(q, kWq), widen(k, kWk), widen(v, kWv), wo, lse.f32());
    narrow(wo, o);
  }
  void backward_impl(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                     const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override {
    if (cudnn_ && cudnn_->backward(d, q, k, v, o, lse, dout, dq, dk, dv)) return;
    if (q.dtype() == DType::F32)
      return backward_f32(d, q.f32(), k.f32(), v.f32(), o.f32(), lse.f32(), dout.f32(), dq.f32(), dk.f32(), dv.f32());
    float* wdq = wide_[kWdq].as<float>(c_, size_t(dq.numel()));
    float* wdk = wide_[kWdk].as<float>(c_, size_t(dk.numel()));
    float* wdv = wide_[kWdv].as<float>(c_, size_t(dv.numel()));
    backward_f32(d, widen(q, kWq), widen(k, kWk), widen(v, kWv), widen(o, kWo), lse.f32(), widen(dout, kWdout), wdq,
                 wdk, wdv);
    narrow(wdq, dq);
    narrow(wdk, dk);
    narrow(wdv, dv);
  }

  void forward_f32(const AttentionDims& d, const float* q, const float* k, const float* v, float* o, float* lse) {
    if (gemm_) return gemm_->forward(d, q, k, v, o, lse);
    TRAINER_LAUNCH(attention_fwd_kernel, grid(d.B * d.H * d.T), unsigned(kThreads), c_.stream(), q, k, v, o, lse, d);
  }
  void backward_f32(const AttentionDims& d, const float* q, const float* k, const float* v, const float* o,
                    const float* lse, const float* dout, float* dq, float* dk, float* dv) {
    if (gemm_) return gemm_->backward(d, q, k, v, o, lse, dout, dq, dk, dv);
    float* D = dbuf_.as<float>(c_, size_t(d.B * d.H * d.T > 0 ? d.B * d.H * d.T : 1));
    TRAINER_LAUNCH(attention_bwd_rows_kernel, grid(d.B * d.H * d.T), unsigned(kThreads), c_.stream(), q, k, v, o, lse,
                   dout, dq, D, d);
    TRAINER_LAUNCH(attention_bwd_keys_kernel, grid(d.B * d.H * d.S), unsigned(kThreads), c_.stream(), q, k, v, lse,
                   dout, D, dk, dv, d);
  }

  // A low tensor's values widened into scratch `slot` (f32), and f32 values rounded into a low tensor.
  enum { kWq, kWk, kWv, kWo, kWdout, kWdq, kWdk, kWdv, kWide };
  const float* widen(const Tensor& t, int slot) {
    float* w = wide_[slot].as<float>(c_, size_t(t.numel()));
    cuda::dispatch_float("attention", "a low operand", t, [&](auto x) {
      using T = decltype(x);
      cuda::tmap1(c_, cuda::ptr<T>(t), w, t.numel(), cuda::CopyAsIs{});
    });
    return w;
  }
  void narrow(const float* w, Tensor& t) {
    cuda::dispatch_float("attention", "a low output", t, [&](auto x) {
      using T = decltype(x);
      cuda::tmap1(c_, w, cuda::ptr<T>(t), t.numel(), cuda::CopyAsIs{});
    });
  }
  unsigned grid(int64_t blocks) const {
    if (blocks > int64_t(INT32_MAX)) ck_.fail(blocks, " rows are more than one launch takes");
    return unsigned(blocks);
  }

  CudaContext& c_;
  std::optional<cuda::AttentionCudnn> cudnn_;  // the attn_cudnn fast path (bf16/fp16), when the context takes it
  std::optional<cuda::AttentionGemm> gemm_;    // the attn_gemm fast path, when the context takes it
  Scratch dbuf_;  // the reference path's D_i = do_i·o_i per query row
  Scratch wide_[kWide];  // low tensors' f32 values on the paths that compute from f32
};

static RegisterKernel<AttentionKernel, CudaAttention> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
