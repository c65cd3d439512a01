// A sequence [N, T, C] as the one-row NCHW image [N, C, 1, T] and back, around the 2-D Conv and pooling nodes that run conv1d and the 1D pools.
#pragma once
#include <string>

#include "core/export/registry.h"

namespace trainer::onnx_export {

// OpenCV 4.6 sizes 1-D Conv and pooling nodes with unequal pads wrongly: the 1D layers export as
// their 2-D forms over one row. Returns the name of x as [N, C, 1, T] (Reshape, Transpose).
inline std::string sequence_as_row(ExportContext& ctx, const std::string& layer, const std::string& x, int64_t T, int64_t C) {
  const std::string rows = ctx.fresh(layer + "/rows"), nchw = ctx.fresh(layer + "/nchw");
  ctx.add_node("Reshape", {x, ctx.add_int64s(layer + "/image_shape", {0, 1, T, C})}, {rows});
  attr_ints(ctx.add_node("Transpose", {rows}, {nchw}), "perm", {0, 3, 1, 2});
  return nchw;
}

// y [N, C', 1, T'] back to the sequence [N, T', C'] named `out` (Transpose, Reshape).
inline void row_as_sequence(ExportContext& ctx, const std::string& layer, const std::string& y, int64_t T, int64_t C,
                            const std::string& out) {
  const std::string nhwc = ctx.fresh(layer + "/nhwc");
  attr_ints(ctx.add_node("Transpose", {y}, {nhwc}), "perm", {0, 2, 3, 1});
  ctx.add_node("Reshape", {nhwc, ctx.add_int64s(layer + "/sequence_shape", {0, T, C})}, {out});
}

}  // namespace trainer::onnx_export
