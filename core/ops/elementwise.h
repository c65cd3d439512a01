// Element-wise op family: sum of tensors, accumulate, scale, channel concat/split, dropout.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

// Shape logic shared by the backends' element-wise kernels.
namespace elementwise {

// [rows, width] view of a tensor whose last axis is `width`.
inline int64_t rows_of(const Tensor& t) {
  return t.shape().rank() ? t.numel() / std::max<int64_t>(t.shape().back(), 1) : 1;
}

// Leading dimensions (all but the last) agree.
inline bool same_lead(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank() || a.rank() == 0) return false;
  for (size_t i = 0; i + 1 < a.rank(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// The concat inputs' widths add up to y's.
inline void check_concat_width(int64_t inputs, int64_t width) {
  if (inputs != width) shape_checks::fail("concat: inputs have ", inputs, " channels in all, y has ", width);
}

// The width of each split output in dy's last axis (dy of rank >= 1). An undefined output is
// skipped, but its width is needed for the offsets of the others: it is its shape's last axis when
// it carries one (Tensor::view(nullptr, shape, ...)), otherwise the remainder when it is the only
// one without a shape.
inline std::vector<int64_t> split_widths(const Tensor& dy, const std::vector<Tensor*>& dxs) {
  using shape_checks::fail;
  const int64_t width = dy.shape().back();
  std::vector<int64_t> w(dxs.size(), -1);
  int64_t known = 0, unknown = 0;
  for (size_t i = 0; i < dxs.size(); ++i) {
    const Tensor* t = dxs[i];
    if (t && t->shape().rank() > 0) {
      if (!same_lead(t->shape(), dy.shape()))
        fail("split: output ", i, " [", t->shape().str(), "] does not match dy [", dy.shape().str(),
             "] outside the last axis");
      w[i] = t->shape().back();
      known += w[i];
    } else {
      if (t && t->defined()) fail("split: output ", i, " is defined but has no shape");
      ++unknown;
    }
  }
  if (unknown > 1) fail("split: ", unknown, " skipped outputs carry no shape, so the offsets are unknown");
  if (unknown == 1)
    for (auto& v : w)
      if (v < 0) v = width - known;
  if (unknown == 0 && known != width) fail("split: outputs have ", known, " channels in all, dy has ", width);
  if (unknown == 1 && known > width) fail("split: outputs have ", known, " channels, more than dy's ", width);
  return w;
}

}  // namespace elementwise

struct ElementwiseParams {};

class ElementwiseKernel {
 public:
  using Params = ElementwiseParams;
  static constexpr const char* kName = "elementwise";
  virtual ~ElementwiseKernel() = default;
  // Element types: f32 everywhere, and on the CPU also bf16 (mixed precision activations) where
  // noted. bf16 values are computed in f32 and rounded to nearest even once, when stored.
  // y = sum of xs (all of y's shape and type; f32 or bf16)
  virtual void add(const std::vector<const Tensor*>& xs, Tensor& y) = 0;
  // y += x (same shape; each f32 or bf16, independently)
  virtual void accumulate(const Tensor& x, Tensor& y) = 0;
  // y = x converted to y's type (same shape; each f32 or bf16; a copy when they agree)
  virtual void convert(const Tensor& x, Tensor& y) = 0;
  // y = a * y (f32)
  virtual void scale(Tensor& y, float a) = 0;
  // Concatenate along the last axis: y [..., sum C_i] (all of one type, f32 or bf16)
  virtual void concat(const std::vector<const Tensor*>& xs, Tensor& y) = 0;
  // The inverse: slices of dy's last axis into dxs (undefined entries are skipped; dy's type)
  virtual void split(const Tensor& dy, const std::vector<Tensor*>& dxs) = 0;
};

struct DropoutParams {
  float rate = 0.5f;
};

class DropoutKernel {
 public:
  using Params = DropoutParams;
  static constexpr const char* kName = "dropout";
  virtual ~DropoutKernel() = default;
  // Inverted dropout: y = x * keep / (1 - rate). The keep mask is a pure function of
  // (seed, element index) (counter-based RNG), so backends and runs agree bit for bit; the mask
  // (u8, x's shape) is saved for backward.
  virtual void forward(const Tensor& x, Tensor& y, Tensor& mask, uint64_t seed) = 0;
  virtual void backward(const Tensor& dy, const Tensor& mask, Tensor& dx) = 0;
};

}  // namespace trainer
