// cuDNN convolution algorithm choice: deterministic algorithms of the wanted math type whose workspace fits the context's budget.
#pragma once
#include <cudnn.h>

#include <string>
#include <vector>

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

// The math types a pass may use for tensors of type `t`, as a rank (lower is tried first; -1: never):
//   f32 without `tf32`: strict FMA only (rank 0);
//   f32 with `tf32`:    tensor-op or cuDNN's default math (which allow TF32 on Ampere and later) and
//                       FMA, in cuDNN's order (rank 0);
//   bf16 and f16:       tensor-op or default math (rank 0), then FMA as a last resort (rank 1): for
//                       odd channel counts (the 3-channel stem of every config) cuDNN's only NHWC
//                       bf16 kernels may be FMA ones, and refusing them would leave the fallback or
//                       "no deterministic cuDNN algorithm".
// conv_math: the math type to ask for first. math_name: "FMA", "TENSOR_OP", ... for messages.
int conv_math_rank(DType t, bool tf32, cudnnMathType_t m);
cudnnMathType_t conv_math(DType t, bool tf32);
const char* math_name(cudnnMathType_t m);

// One heuristic candidate as cuDNN reports it.
struct ConvCandidate {
  int algo;
  cudnnStatus_t status;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
  size_t memory;
};

// The indices of `list` (cuDNN's order, fastest first) worth trying, in the order to try them:
// those that succeeded, are deterministic and have an allowed math type, by rank, cuDNN's order
// within a rank. Pure (no cuDNN call): unit-tested on the CPU.
std::vector<size_t> conv_try_order(const std::vector<ConvCandidate>& list, DType t, bool tf32);

// Picks `pass`'s algorithm once per shape (never inside the step loop): cuDNN's heuristic
// candidates (cudnnGet*Algorithm_v7, fastest first) in conv_try_order, the first whose workspace
// fits c.workspace_budget(); when a faster candidate was passed over only for its workspace, or
// only FMA math was left for bf16/f16, one line on stderr says so. No candidate at all: the pass's
// deterministic fallback (PyTorch's choices in deterministic mode), whatever its workspace, in the
// preferred math type, then FMA. `what` names the layer's shape in messages; TRAINER_CUDNN_LOG=1
// prints every choice (shape, pass, algorithm, math type, workspace). TRAINER_CUDNN_FIND=1, an
// experiment: the candidates are measured (cudnnFind*, as PyTorch's cudnn.benchmark) instead of
// guessed (cuda_conv_algo.cu says what that costs). Leaves the descriptor's math type set to the
// choice's.
ConvAlgo choose_conv_algo(CudaContext& c, const ConvDescs& d, ConvPass pass, DType t, const std::string& what);

// Sets the math type of d.conv (cuDNN keeps one per descriptor; each pass sets its own).
void set_conv_math(const ConvDescs& d, cudnnMathType_t m);

}  // namespace trainer
