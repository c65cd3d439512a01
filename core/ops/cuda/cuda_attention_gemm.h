// CUDA attention's fast path (FastPath::AttnGemm): batched cuBLAS GEMMs on tensor cores around a kernel of the rows' masked softmax, in chunks of (batch, head) pairs (attention_gemm.h).
#pragma once
#include <vector>

#include "core/ops/attention.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_dtype.cuh"
#include "core/ops/math/attention_gemm.h"
#include "core/ops/math/attention_math.h"

namespace trainer::cuda {

// The dropout draw of a call: its seed read where the kernel runs when it is a recorded step's.
__device__ __forceinline__ attn::Drop attention_drop(const AttentionDims& d) {
  return attn::make_drop(d.rate, d.drop.resolve());
}

// fp32 contexts multiply in fp32 (sgemm; TF32 where the context allows it), bf16/fp16 ones round
// q, k, v, dout and the rows' probabilities and score gradients to the low type and multiply on
// tensor cores with fp32 accumulation and fp32 results, as the dense layer does. The scratch holds
// one chunk's scores and score gradients (at most kChunkFloats each, or one pair's T·S).
class AttentionGemm {
 public:
  static constexpr int64_t kChunkFloats = int64_t(1) << 24;  // 64 MiB of f32 scores per buffer

  AttentionGemm(CudaContext& c, DType low, int64_t chunk_floats = kChunkFloats);
  void forward(const AttentionDims& d, const float* q, const float* k, const float* v, float* o, float* lse);
  void backward(const AttentionDims& d, const float* q, const float* k, const float* v, const float* o,
                const float* lse, const float* dout, float* dq, float* dk, float* dv);

 private:
  struct Ptrs;
  void run(const attn_gemm::Gemm& g, const Ptrs& p);
  void prepare(const AttentionDims& d, const std::vector<attn_gemm::Chunk>& chunks, Ptrs& p, bool backward);
  void operand(Ptrs& p, attn_gemm::Buf b, LowCopy& copy, const float* x, int64_t n);

  CudaContext& c_;
  DType low_;
  int64_t chunk_floats_;
  Scratch scores_, dprobs_, probs_low_, dscores_low_;
  LowCopy ql_, kl_, vl_, dol_;
};

}  // namespace trainer::cuda
