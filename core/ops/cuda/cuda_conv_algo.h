// cuDNN convolution algorithm choice: deterministic algorithms of the wanted math type whose workspace fits the context's budget.
#pragma once
#include <cudnn.h>

#include <string>

#include "core/ops/cuda/cuda_context.h"

namespace trainer {

enum class ConvPass { Forward, BackwardData, BackwardFilter };

// The descriptors of one convolution as cuDNN sees it.
struct ConvDescs {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
};

struct ConvAlgo {
  int algo = 0;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;
};

// The math types a pass may use for tensors of type `t`: f32 strict FMA (no TF32) unless `tf32`,
// then cuDNN's default or tensor-op math too (which allow TF32 on Ampere and later); tensor cores
// (or cuDNN's default, which allows them) for bf16 and f16. conv_math: the one to ask for.
bool conv_math_allowed(DType t, bool tf32, cudnnMathType_t m);
cudnnMathType_t conv_math(DType t, bool tf32);

// Picks `pass`'s algorithm once per shape (never inside the step loop): cuDNN's heuristic
// candidates (cudnnGet*Algorithm_v7, fastest first) that succeed, are deterministic and use an
// allowed math type, the first whose workspace fits c.workspace_budget(); when a faster candidate
// was passed over only for its workspace, one line on stderr says which was chosen instead. No
// candidate at all: the pass's deterministic fallback (PyTorch's choices in deterministic mode),
// whatever its workspace. `what` names the layer's shape in messages. Leaves the descriptor's math
// type set to the choice's.
ConvAlgo choose_conv_algo(CudaContext& c, const ConvDescs& d, ConvPass pass, DType t, const std::string& what);

// Sets the math type of d.conv (cuDNN keeps one per descriptor; each pass sets its own).
void set_conv_math(const ConvDescs& d, cudnnMathType_t m);

}  // namespace trainer
