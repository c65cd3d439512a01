// Test hook: the GPU's column reducer (cuda_reduce.cuh) run on host data, for the tests that compare it bit for bit with its host emulation.
#pragma once
#include <cstdint>
#include <vector>

namespace trainer {
class OpContext;

namespace cuda {

// x [m, C] (f32, row-major) through the column reducer of ctx's GPU (a CUDA context). K = 1: per
// column Σx (the bias gradients' terms); K = 2: Σd and Σd² of d = x - x[0, c] (batch norm's centred
// terms). Returns the [C][K] doubles the epilogue received, as colred::column_reduce_reference
// computes them on the host with the same terms. Synchronises.
std::vector<double> column_reduce_on_gpu(OpContext& ctx, const std::vector<float>& x, int64_t m, int64_t C, int K);

}  // namespace cuda
}  // namespace trainer
