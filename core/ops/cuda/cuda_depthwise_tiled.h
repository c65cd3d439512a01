// The dw_tiled fast path of the CUDA depthwise conv2d: kernels specialised to 3x3 and 5x5 windows at stride 1 or 2 (their arithmetic: depthwise_tiled_math.h); each entry point says whether it took the call.
#pragma once
#include "core/ops/context.h"
#include "core/ops/math/depthwise_math.h"

namespace trainer {
class CudaContext;
}

namespace trainer::cuda {

// Whether the tiled filter-gradient kernel takes a call of this shape: the window
// (depthwise_tiled::takes_window) and every count of the call below 2^30 (32-bit indices).
bool dw_tiled_takes(const depthwise_math::DwShape& s, bool bias);

// y = x ⋆ w (+ b) by the tiled forward kernel, the general kernel's bits. False, with nothing
// done, where it does not take the call: the window, C not a multiple of the 16-byte vector of
// x's type, x or y not 16-byte aligned. The caller runs the general kernel then.
bool dw_tiled_forward(CudaContext& c, const depthwise_math::DwShape& s, const Tensor& x, const float* w, const float* b,
                      Tensor& y);

// dx from dy and w by the tiled kernel, the general kernel's bits; false as dw_tiled_forward.
bool dw_tiled_backward_data(CudaContext& c, const depthwise_math::DwShape& s, const Tensor& dy, const float* w,
                            Tensor& dx);

// dw (and db where given) by blocks of rows, then a warp per value over the blocks' partials
// (kept in `partial`, grown once per shape). Only where dw_tiled_takes(s, db != nullptr); at least
// one row.
void dw_tiled_filter(CudaContext& c, const depthwise_math::DwShape& s, const Tensor& x, const Tensor& dy,
                     Scratch& partial, float* dw, float* db);

// Each call the tiled kernels take counts one in cuda::path_calls(PathCount::DwTiled)
// (cuda_path_counts.h): the tests' proof that the fast path ran.

}  // namespace trainer::cuda
