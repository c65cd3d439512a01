// CUDA attention's cuDNN fast path (FastPath::AttnCudnn): cuDNN 9's fused flash-attention engines through its graph API (attention_graph.h), forward and backward, under bf16/fp16, a plan per shape built at its first call. Host code may include it (the tests ask takes()).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/ops/attention.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cudnn_graph.h"

namespace trainer::cuda {

// The layer's f32 q, k, v (and o, dout) are rounded to the low type into scratch copies, cuDNN's
// fused kernel runs on them (f32 accumulation, the log-sum-exp written to our lse in f32), and its
// low-type outputs are widened into the f32 tensors. The backward graph is the one cuDNN runs
// deterministically (attention_graph.h). A shape whose plan cuDNN refuses is said once on stderr
// and answered false: the caller runs attn_gemm for it.
class AttentionCudnn {
 public:
  // The cuDNN releases it runs on, from cudnn-frontend's rules for these graphs
  // (sdpa_support_surface.h): 9.6 and later but 9.10.0 and 9.10.1 (whose SDPA the frontend blocks
  // for known bugs); before 9.16 backward only for key counts that are multiples of 128 (the
  // frontend pads the others with a workaround this path does not build). The GPU machine's cuDNN
  // is PyTorch's wheel's, not the toolkit's 9.19.
  static constexpr size_t kMinVersion = 90600;
  static constexpr size_t kAnyKeysVersion = 91600;

  // Whether the fast path takes a call of these sizes under cuDNN `version` (cudnnGetVersion()'s
  // form): no dropout (cuDNN's would draw another mask than ours), one head width for keys and
  // values, a multiple of 8 up to 256, at least one key; backward not for one query against one key
  // (which the frontend refuses), and the version rules above.
  static bool takes(const AttentionDims& d, bool backward, size_t version = cudnnGetVersion());

  // Calls that cuDNN ran (forward and backward, every instance of the process): how the tests tell
  // that a shape did not fall back.
  static uint64_t runs();

  AttentionCudnn(CudaContext& c, DType low);
  ~AttentionCudnn();
  // false: no plan for this shape (the caller computes the call another way). The tensors are
  // AttentionKernel's: all f32 (rounded to the low type into copies, the outputs widened back) or
  // all of the context's low type (read and written where they are); lse f32.
  bool forward(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, Tensor& lse);
  bool backward(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);

  struct Buffers;  // the low-type copies and outputs, the softmax sums (cuda_attention_cudnn.cu)

 private:
  struct Entry;
  Entry* plan_for(const AttentionDims& d, bool backward);  // null: cuDNN refused the shape
  template <class T>
  bool run_forward(Entry& e, const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o,
                   float* lse);
  template <class T>
  bool run_backward(Entry& e, const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& o, const float* lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);

  CudaContext& c_;
  DType low_;
  std::vector<std::unique_ptr<Entry>> plans_;  // one per shape and pass, refused ones included
  std::unique_ptr<Buffers> b_;
};

}  // namespace trainer::cuda
