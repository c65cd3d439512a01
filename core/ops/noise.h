// Noise op family: Keras's GaussianNoise (x + stddev·z) and GaussianDropout (x·(1 + stddev·z)) in training, z a standard normal value drawn per element from the step's seed (core/ops/math/gaussian_noise.h).
#pragma once
#include <cmath>

#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"
#include "core/ops/step_scalars.h"

namespace trainer {

struct NoiseParams {
  float stddev = 0.0f;          // > 0
  bool multiplicative = false;  // GaussianDropout: stddev = sqrt(rate / (1 - rate))
};

class NoiseKernel {
 public:
  using Params = NoiseParams;
  static constexpr const char* kName = "noise";
  virtual ~NoiseKernel() = default;
  NoiseKernel(const NoiseKernel&) = delete;
  NoiseKernel& operator=(const NoiseKernel&) = delete;

  // y = x with the noise of `seed` (f32; y may be x). Nothing is kept: backward draws the same
  // values again from the seed.
  void forward(const Tensor& x, Tensor& y, DropoutSeed seed) {
    ck_.dtype("x", x, DType::F32);
    ck_.shape("y", y, x.shape());
    forward_impl(x, y, seed);
  }
  // dx = dy·(1 + stddev·z) with the forward's z (multiplicative), dy itself (additive); dx may be dy.
  void backward(const Tensor& dy, Tensor& dx, DropoutSeed seed) {
    ck_.dtype("dy", dy, DType::F32);
    ck_.shape("dx", dx, dy.shape());
    backward_impl(dy, dx, seed);
  }

 protected:
  NoiseKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {
    if (!(p.stddev > 0.0f) || !std::isfinite(p.stddev)) ck_.fail("stddev must be positive and finite, got ", p.stddev);
  }
  // Called with checked arguments only.
  virtual void forward_impl(const Tensor& x, Tensor& y, DropoutSeed seed) = 0;
  virtual void backward_impl(const Tensor& dy, Tensor& dx, DropoutSeed seed) = 0;

  const Params p_;

 private:
  shape_checks::Checks ck_;
};

}  // namespace trainer
