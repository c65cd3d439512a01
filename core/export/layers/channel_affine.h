// A per-channel x·scale + offset in ONNX nodes that OpenCV 4.6 runs: BatchNormalization on an image, MatMul by diag(scale) and Add on a vector or sequence.
#pragma once
#include <string>
#include <vector>

#include "core/export/registry.h"

namespace trainer::onnx_export {

// `in` (an activation of the trainer's shape `s` without the batch: an image [H, W, C] held as
// NCHW, or a vector or sequence [.., C]) times scale plus offset along the channels, named `out`.
// An image's as BatchNormalization (mean 0, variance 1, epsilon 0: the affine map alone); a vector's
// or sequence's as MatMul by diag(scale), then Add of offset (OpenCV 4.6 refuses a Mul of a
// sequence by a constant [C]). Initialisers are named after `name`.
inline void channel_affine(ExportContext& ctx, const std::string& name, const std::string& in, const Shape& s,
                           const std::vector<float>& scale, const std::vector<float>& offset, const std::string& out) {
  const int64_t C = int64_t(scale.size());
  if (s.rank() == 3) {
    attr_float(ctx.add_node("BatchNormalization",
                            {in, ctx.add_initializer(name + "/scale", {C}, scale), ctx.add_initializer(name + "/offset", {C}, offset),
                             ctx.add_initializer(name + "/mean0", {C}, std::vector<float>(size_t(C), 0.0f), "zeros"),
                             ctx.add_initializer(name + "/var1", {C}, std::vector<float>(size_t(C), 1.0f), "ones")},
                            {out}),
               "epsilon", 0.0f);
    return;
  }
  std::vector<float> diag(size_t(C * C), 0.0f);
  for (int64_t k = 0; k < C; ++k) diag[size_t(k * C + k)] = scale[size_t(k)];
  const std::string scaled = ctx.fresh(name + "/scaled");
  ctx.add_node("MatMul", {in, ctx.add_initializer(name + "/scale_diag", {C, C}, diag, "diag(scale)")}, {scaled});
  ctx.add_node("Add", {scaled, ctx.add_initializer(name + "/offset", {C}, offset)}, {out});
}

}  // namespace trainer::onnx_export
