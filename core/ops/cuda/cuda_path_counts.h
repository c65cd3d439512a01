// How many calls each CUDA fast path without a reference-path twin in its own kernel took in this process: the tests' proof that the path ran.
#pragma once
#include <cstdint>

namespace trainer::cuda {

enum class PathCount {
  DwTiled,      // dw_tiled: a tiled depthwise forward, backward data or filter gradient (each counts one)
  Conv1x1Gemm,  // conv_1x1_gemm: a 1x1 convolution's forward or backward by the dense layer's GEMMs
  kCount
};

void count_path(PathCount p);
int64_t path_calls(PathCount p);

}  // namespace trainer::cuda
