// CUDA attention as batched cuBLAS GEMMs around one kernel of the rows' masked softmax (forward) and score gradients (backward), chunk by chunk of (batch, head) pairs (attention_gemm.h).
#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/ops/cuda/cuda_attention_gemm.h"
#include "core/ops/math/attention_math.h"

namespace trainer::cuda {

using attn_gemm::Buf;
using attn_gemm::Chunk;

namespace {

constexpr int kRowThreads = 256;

// Block r = e·T + i of a chunk: score row i of its pair e, S floats at scores + r·S. Writes the
// row's lse and its probabilities times their dropout factors (0 past the visible keys) into
// probs, which may be scores itself (each element is read, then written, by one thread).
template <class P>
__global__ void softmax_rows_kernel(const float* scores, P* probs, float* lse, AttentionDims d, Chunk c) {
  const int64_t r = blockIdx.x, e = r / d.T, i = r % d.T, bh = attn_gemm::pair_of(c, d.H, e);
  const float* s = scores + r * d.S;
  P* p = probs + r * d.S;
  const int64_t keys = attn::visible_keys(i, d.S, d.causal);
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) m = fmaxf(m, s[j]);
  m = block_max(m);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) sum += double(expf(s[j] - m));
  const float l = attn::lse_of(m, block_sum(sum));  // every read of s above is done (block_sum syncs)
  const attn::Drop drop = attention_drop(d);
  for (int64_t j = threadIdx.x; j < d.S; j += blockDim.x) {
    const float v = j < keys ? attn::prob(s[j], l) * attn::drop_factor(drop, attn::element(bh, i, j, d.T, d.S)) : 0.0f;
    p[j] = from_f32<P>(v);
  }
  if (threadIdx.x == 0) lse[bh * d.T + i] = l;
}

// Block r = e·T + i: from the row's scores, dp = do_i·v_j (dprobs) and the saved lse, the
// probabilities times their dropout factors (for dV) and the score gradients
// ds = scale·p·(dp·m - D), D = do_i·o_i (attention_math.h); in place as above.
template <class P>
__global__ void grad_rows_kernel(const float* scores, const float* dprobs, P* probs, P* dscores, const float* o,
                                 const float* dout, const float* lse, AttentionDims d, Chunk c) {
  const int64_t r = blockIdx.x, e = r / d.T, i = r % d.T, bh = attn_gemm::pair_of(c, d.H, e);
  const int64_t b = bh / d.H, h = bh % d.H, row = (b * d.T + i) * d.H * d.Dv + h * d.Dv;
  double part = 0.0;
  for (int64_t t = threadIdx.x; t < d.Dv; t += blockDim.x) part += double(dout[row + t]) * double(o[row + t]);
  const float D = float(block_sum(part));
  const float l = lse[bh * d.T + i];
  const float* s = scores + r * d.S;
  const float* dp = dprobs + r * d.S;
  P* pm = probs + r * d.S;
  P* ds = dscores + r * d.S;
  const int64_t keys = attn::visible_keys(i, d.S, d.causal);
  const attn::Drop drop = attention_drop(d);
  for (int64_t j = threadIdx.x; j < d.S; j += blockDim.x) {
    float pf = 0.0f, g = 0.0f;
    if (j < keys) {
      const float p = attn::prob(s[j], l), f = attn::drop_factor(drop, attn::element(bh, i, j, d.T, d.S));
      pf = p * f;
      g = d.scale * attn::score_grad(p, dp[j] * f, D);
    }
    pm[j] = from_f32<P>(pf);
    ds[j] = from_f32<P>(g);
  }
}

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) fail("attention: ", what, " = ", v, " exceeds cuBLAS's 32-bit dimensions");
  return int(v);
}

cublasOperation_t op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

// f(T{}) for the GEMM operands' type: float, bf16 or f16.
template <class F>
void with_low(DType low, F&& f) {
  if (low == DType::BF16) f(bf16{});
  else if (low == DType::F16) f(f16{});
  else f(float{});
}

attn_gemm::Dims gemm_dims(const AttentionDims& d) { return {d.B, d.T, d.S, d.H, d.Dk, d.Dv, d.scale}; }

// The most pairs of any chunk: the scratch holds that many T x S matrices.
int64_t most_pairs(const std::vector<Chunk>& cs) {
  int64_t n = 0;
  for (const Chunk& c : cs) n = c.count > n ? c.count : n;
  return n;
}

}  // namespace

// Each buffer's address and whether it holds the low type (else f32).
struct AttentionGemm::Ptrs {
  static constexpr int kBufs = int(Buf::DScores) + 1;  // the last of attn_gemm::Buf
  void* at[kBufs] = {};
  bool low[kBufs] = {};
  void set(Buf b, const void* p, bool is_low) {
    at[int(b)] = const_cast<void*>(p);
    low[int(b)] = is_low;
  }
};

AttentionGemm::AttentionGemm(CudaContext& c, DType low, int64_t chunk_floats)
    : c_(c), low_(low), chunk_floats_(chunk_floats) {
  cublasPointerMode_t mode;
  CUBLAS_CHECK(cublasGetPointerMode(c_.cublas(), &mode));
  if (mode != CUBLAS_POINTER_MODE_HOST)  // alpha/beta below are host scalars
    throw DeviceError("attention: the cuBLAS handle of " + c_.device().str() + " is not in host pointer mode");
}

void AttentionGemm::run(const attn_gemm::Gemm& g, const Ptrs& p) {
  const bool lowered = low_ != DType::F32;
  if (!attn_gemm::valid(g) || p.low[int(g.a.buf)] != lowered || p.low[int(g.b.buf)] != lowered || p.low[int(g.c.buf)])
    throw std::logic_error("attention: a GEMM of the plan does not fit its buffers");
  auto at = [&](const attn_gemm::Operand& o) {
    return static_cast<char*>(p.at[int(o.buf)]) + o.offset * (p.low[int(o.buf)] ? 2 : 4);
  };
  const int m = to_int(g.m, "m"), n = to_int(g.n, "n"), k = to_int(g.k, "k"), batch = to_int(g.batch, "batch");
  const int lda = to_int(g.a.ld, "lda"), ldb = to_int(g.b.ld, "ldb"), ldc = to_int(g.c.ld, "ldc");
  const float alpha = g.alpha, beta = g.beta;
  if (!lowered) {
    CUBLAS_CHECK(cublasSgemmStridedBatched(c_.cublas(), op(g.ta), op(g.tb), m, n, k, &alpha,
                                           reinterpret_cast<const float*>(at(g.a)), lda, g.a.stride,
                                           reinterpret_cast<const float*>(at(g.b)), ldb, g.b.stride, &beta,
                                           reinterpret_cast<float*>(at(g.c)), ldc, g.c.stride, batch));
    return;
  }
  const cudaDataType_t t = low_ == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(c_.cublas(), op(g.ta), op(g.tb), m, n, k, &alpha, at(g.a), t, lda, g.a.stride,
                                          at(g.b), t, ldb, g.b.stride, &beta, at(g.c), CUDA_R_32F, ldc, g.c.stride, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The score buffers (one chunk's), and Probs/DScores: Scores/DProbs themselves in f32, low copies
// otherwise.
void AttentionGemm::prepare(const AttentionDims& d, const std::vector<Chunk>& chunks, Ptrs& p, bool backward) {
  const int64_t n = most_pairs(chunks) * d.T * d.S;
  const bool lowered = low_ != DType::F32;
  float* sc = scores_.as<float>(c_, size_t(n));
  p.set(Buf::Scores, sc, false);
  float* dp = backward ? dprobs_.as<float>(c_, size_t(n)) : nullptr;
  if (backward) p.set(Buf::DProbs, dp, false);
  if (!lowered) {
    p.set(Buf::Probs, sc, false);
    if (backward) p.set(Buf::DScores, dp, false);
    return;
  }
  p.set(Buf::Probs, probs_low_.get(c_, size_t(n) * 2), true);
  if (backward) p.set(Buf::DScores, dscores_low_.get(c_, size_t(n) * 2), true);
}

// An f32 operand, or its copy in the low type.
void AttentionGemm::operand(Ptrs& p, Buf b, LowCopy& copy, const float* x, int64_t n) {
  with_low(low_, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>) p.set(b, x, false);
    else p.set(b, copy.of<T>(c_, x, n), true);
  });
}

void AttentionGemm::forward(const AttentionDims& d, const float* q, const float* k, const float* v, float* o,
                            float* lse) {
  if (d.B == 0 || d.T == 0) return;
  const attn_gemm::Dims g = gemm_dims(d);
  Ptrs p;
  operand(p, Buf::Q, ql_, q, d.B * d.T * d.H * d.Dk);
  operand(p, Buf::K, kl_, k, d.B * d.S * d.H * d.Dk);
  operand(p, Buf::V, vl_, v, d.B * d.S * d.H * d.Dv);
  p.set(Buf::O, o, false);
  const std::vector<Chunk> chunks = attn_gemm::chunks(g, chunk_floats_);
  prepare(d, chunks, p, false);
  for (const Chunk& ch : chunks) {
    run(attn_gemm::scores(g, ch), p);
    const unsigned rows = unsigned(to_int(ch.count * d.T, "rows"));
    const float* sc = static_cast<const float*>(p.at[int(Buf::Scores)]);
    with_low(low_, [&](auto t) {
      using T = decltype(t);
      TRAINER_LAUNCH(softmax_rows_kernel<T>, rows, unsigned(kRowThreads), c_.stream(), sc,
                     static_cast<T*>(p.at[int(Buf::Probs)]), lse, d, ch);
    });
    run(attn_gemm::output(g, ch), p);
  }
}

void AttentionGemm::backward(const AttentionDims& d, const float* q, const float* k, const float* v, const float* o,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  if (d.B == 0) return;
  if (d.T == 0) {  // no query sees a key: dk and dv are sums over no rows (dq is empty)
    c_.fill_zero(dk, size_t(d.B * d.S * d.H * d.Dk) * sizeof(float));
    c_.fill_zero(dv, size_t(d.B * d.S * d.H * d.Dv) * sizeof(float));
    return;
  }
  const attn_gemm::Dims g = gemm_dims(d);
  Ptrs p;
  operand(p, Buf::Q, ql_, q, d.B * d.T * d.H * d.Dk);
  operand(p, Buf::K, kl_, k, d.B * d.S * d.H * d.Dk);
  operand(p, Buf::V, vl_, v, d.B * d.S * d.H * d.Dv);
  operand(p, Buf::dO, dol_, dout, d.B * d.T * d.H * d.Dv);
  p.set(Buf::dQ, dq, false);
  p.set(Buf::dK, dk, false);
  p.set(Buf::dV, dv, false);
  const std::vector<Chunk> chunks = attn_gemm::chunks(g, chunk_floats_);
  prepare(d, chunks, p, true);
  const float* sc = static_cast<const float*>(p.at[int(Buf::Scores)]);
  const float* dp = static_cast<const float*>(p.at[int(Buf::DProbs)]);
  for (const Chunk& ch : chunks) {
    run(attn_gemm::scores(g, ch), p);
    run(attn_gemm::dprobs(g, ch), p);
    const unsigned rows = unsigned(to_int(ch.count * d.T, "rows"));
    with_low(low_, [&](auto t) {
      using T = decltype(t);
      TRAINER_LAUNCH(grad_rows_kernel<T>, rows, unsigned(kRowThreads), c_.stream(), sc, dp,
                     static_cast<T*>(p.at[int(Buf::Probs)]), static_cast<T*>(p.at[int(Buf::DScores)]), o, dout, lse, d,
                     ch);
    });
    run(attn_gemm::dvalues(g, ch), p);
    run(attn_gemm::dqueries(g, ch), p);
    run(attn_gemm::dkeys(g, ch), p);
  }
}

}  // namespace trainer::cuda
