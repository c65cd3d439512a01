// The per-channel bias add of the CUDA kernels (conv2d's epilogue, bias_add): y [rows, c] += b [c] in float, rounded once.
#pragma once
#include <cstdint>

#include "core/ops/cuda/cuda_dtype.cuh"

namespace trainer::cuda {

template <class T>
__global__ void add_bias_kernel(T* __restrict__ y, const float* __restrict__ b, int64_t total, int64_t c) {
  CUDA_GRID_LOOP(i, total) y[i] = from_f32<T>(to_f32(y[i]) + b[i % c]);
}

}  // namespace trainer::cuda
