// Sigmoid cross-entropy op family: binary cross-entropy from logits [N, 1] against 0/1 labels, with accuracy.
#pragma once
#include <cstdint>

#include "core/ops/math/sigmoid_xent_math.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"
#include "core/ops/softmax.h"  // LossStats

namespace trainer {

// label_smoothing: the target of label z is z·(1-ls) + 0.5·ls (sigmoid_xent_math.h).
// class_weight: [2] f32 in the context's memory (class 0's, class 1's) or nullptr, as
// SoftmaxParams::class_weight: weighs each sample's loss and gradient in a call that writes dlogits.
struct SigmoidXentParams {
  float label_smoothing = 0.0f;
  const float* class_weight = nullptr;
};

class SigmoidXentKernel {
 public:
  using Params = SigmoidXentParams;
  static constexpr const char* kName = "sigmoid_xent";
  virtual ~SigmoidXentKernel() = default;
  SigmoidXentKernel(const SigmoidXentKernel&) = delete;
  SigmoidXentKernel& operator=(const SigmoidXentKernel&) = delete;

  // Binary cross-entropy of sigmoid(logits) (f32 [N, 1] or [N]) against labels (i32 0 or 1, [N])
  // as LossStats: loss_sum over samples (summed in a fixed order, so it is bit-reproducible),
  // correct = samples with (logit > 0) == label, count = N, against the label smoothed by the
  // kernel's label_smoothing (the loss is the smoothed loss). Writes dlogits = (sigmoid(logits) -
  // target) * grad_scale when dlogits is defined (logits' shape). A label other than 0 or 1 throws
  // std::out_of_range naming the sample.
  LossStats loss(const Tensor& logits, const Tensor& labels, Tensor& dlogits, float grad_scale) {
    ck_.dtype("logits", logits, DType::F32);
    const Shape& s = logits.shape();
    if (!(s.rank() == 1 || (s.rank() == 2 && s[1] == 1))) ck_.fail("logits must be [N, 1] or [N], got [", s.str(), "]");
    ck_.shape("labels", labels, {s[0]}, DType::I32);
    if (dlogits.defined()) ck_.shape("dlogits", dlogits, s);
    return loss_impl(s[0], logits, labels, dlogits, grad_scale);
  }
  // The same for a recorded step (SoftmaxKernel::cross_entropy_into's rules): the scale from
  // step->loss_scale, the statistics added to `sums`, both read and written where the kernels run.
  void loss_into(const Tensor& logits, const Tensor& labels, Tensor& dlogits, const StepScalars* step, LossSums* sums) {
    ck_.dtype("logits", logits, DType::F32);
    const Shape& s = logits.shape();
    if (!(s.rank() == 1 || (s.rank() == 2 && s[1] == 1))) ck_.fail("logits must be [N, 1] or [N], got [", s.str(), "]");
    ck_.shape("labels", labels, {s[0]}, DType::I32);
    if (dlogits.defined()) ck_.shape("dlogits", dlogits, s);
    loss_into_impl(s[0], logits, labels, dlogits, step, sums);
  }

 protected:
  SigmoidXentKernel(const OpContext& c, const Params& p)
      : label_smoothing_(p.label_smoothing), class_weight_(p.class_weight), ck_(kName, c.device()) {
    if (!(p.label_smoothing >= 0.0f && p.label_smoothing <= 1.0f))
      ck_.fail("label_smoothing must be in [0, 1], got ", p.label_smoothing);
  }
  const float label_smoothing_;
  const float* const class_weight_;  // [2] or nullptr
  // Called with checked arguments only: N samples.
  virtual LossStats loss_impl(int64_t N, const Tensor& logits, const Tensor& labels, Tensor& dlogits,
                              float grad_scale) = 0;
  // Host memory (the CPU): loss_impl with the scale read now, its statistics added.
  virtual void loss_into_impl(int64_t N, const Tensor& logits, const Tensor& labels, Tensor& dlogits,
                              const StepScalars* step, LossSums* sums) {
    add_to(*sums, loss_impl(N, logits, labels, dlogits, step->loss_scale));
  }

 private:
  shape_checks::Checks ck_;
};

}  // namespace trainer
