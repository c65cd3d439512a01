// Sigmoid cross-entropy op family: binary cross-entropy from logits [N, 1] against 0/1 labels, with accuracy.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/ops/hd.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"
#include "core/ops/softmax.h"  // LossStats

namespace trainer {

struct SigmoidXentParams {};

// Per-sample math shared by the backends (host and device: plain float/double arithmetic).
namespace sigmoid_xent {

// Binary cross-entropy of sigmoid(x) against z ∈ {0, 1}, stable for any x:
// max(x, 0) - x·z + log(1 + e^{-|x|}) (TensorFlow's sigmoid_cross_entropy_with_logits), in double.
TRAINER_HD_INLINE double loss(float x, int z) {
  const double v = x;
  return (v > 0 ? v : 0.0) - v * z + log1p(exp(-fabs(v)));
}

// (sigmoid(x) - z) · scale, with e^{-|x|} never overflowing.
TRAINER_HD_INLINE float grad(float x, int z, float scale) {
  const float e = expf(-fabsf(x));
  const float s = x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
  return (s - float(z)) * scale;
}

TRAINER_HD_INLINE bool hit(float x, int z) { return (x > 0.0f) == (z == 1); }

// logits [N, 1] or [N]; labels i32 [N]. Returns N.
inline int64_t check_shapes(const Tensor& logits, const Tensor& labels) {
  using shape_checks::fail;
  const Shape& s = logits.shape();
  if (!(s.rank() == 1 || (s.rank() == 2 && s[1] == 1)))
    fail("sigmoid_xent: logits must be [N, 1] or [N], got [", s.str(), "]");
  if (!labels.defined()) fail("sigmoid_xent: labels are undefined");
  if (labels.dtype() != DType::I32) fail("sigmoid_xent: labels must be i32, got ", dtype_name(labels.dtype()));
  if (labels.shape() != Shape{s[0]})
    fail("sigmoid_xent: labels have shape [", labels.shape().str(), "], expected [", s[0], "]");
  return s[0];
}

}  // namespace sigmoid_xent

class SigmoidXentKernel {
 public:
  using Params = SigmoidXentParams;
  static constexpr const char* kName = "sigmoid_xent";
  virtual ~SigmoidXentKernel() = default;
  // Binary cross-entropy of sigmoid(logits) against labels (i32 0 or 1, [N]) as LossStats:
  // loss_sum over samples (summed in a fixed order, so it is bit-reproducible), correct =
  // samples with (logit > 0) == label, count = N. Writes dlogits = (sigmoid(logits) - label) *
  // grad_scale when dlogits is defined (logits' shape). A label other than 0 or 1 throws
  // std::out_of_range naming the sample.
  virtual LossStats loss(const Tensor& logits, const Tensor& labels, Tensor& dlogits, float grad_scale) = 0;
};

}  // namespace trainer
