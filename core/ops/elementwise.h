// Element-wise op family: sum of tensors, accumulate, scale, channel concat/split, dropout.
#pragma once
#include <vector>

#include "core/ops/registry.h"

namespace trainer {

struct ElementwiseParams {};

class ElementwiseKernel {
 public:
  using Params = ElementwiseParams;
  static constexpr const char* kName = "elementwise";
  virtual ~ElementwiseKernel() = default;
  // y = sum of xs (all of y's shape)
  virtual void add(const std::vector<const Tensor*>& xs, Tensor& y) = 0;
  // y += x
  virtual void accumulate(const Tensor& x, Tensor& y) = 0;
  // y = a * y
  virtual void scale(Tensor& y, float a) = 0;
  // Concatenate along the last axis: y [..., sum C_i]
  virtual void concat(const std::vector<const Tensor*>& xs, Tensor& y) = 0;
  // The inverse: slices of dy's last axis into dxs (undefined entries are skipped)
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
