// Softmax op family: softmax over the last axis, and fused softmax cross-entropy with accuracy.
#pragma once
#include <stdexcept>
#include <utility>

#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"
#include "core/ops/step_scalars.h"

namespace trainer {

struct LossStats {
  double loss_sum = 0;  // sum over samples of the per-sample loss
  int64_t correct = 0;  // samples whose argmax equals the label
  int64_t count = 0;
  LossStats& operator+=(const LossStats& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    count += o.count;
    return *this;
  }
};

inline void add_to(LossSums& sums, const LossStats& s) {
  sums.loss_sum += s.loss_sum;
  sums.correct += s.correct;
  sums.count += s.count;
}

// label_smoothing: cross_entropy's targets are t·(1-ls) + ls/C (softmax_math.h); forward and
// backward ignore it. ignore (Keras's ignore_class, PyTorch's ignore_index): an index label equal to
// ignore_class scores nothing: no loss, no hit, a zero gradient row, and it is not counted.
// class_weight: [C] f32 in the context's memory, kept alive by the caller (nullptr: none): in a
// call that writes dlogits (training; Keras weighs the training loss only), each row's loss and
// gradient are multiplied by its class's weight (softmax_math::class_weight), so the mean loss is
// Σ w·loss / N, Keras's sum_over_batch_size; a call without dlogits (evaluation) is unweighted.
struct SoftmaxParams {
  float label_smoothing = 0.0f;
  bool ignore = false;
  int32_t ignore_class = 0;
  const float* class_weight = nullptr;
};

class SoftmaxKernel {
 public:
  using Params = SoftmaxParams;
  static constexpr const char* kName = "softmax";
  virtual ~SoftmaxKernel() = default;
  SoftmaxKernel(const SoftmaxKernel&) = delete;
  SoftmaxKernel& operator=(const SoftmaxKernel&) = delete;

  // y = softmax(x) over the last axis (f32, rank >= 1)
  void forward(const Tensor& x, Tensor& y) {
    const shape_checks::Checks ck(kName, dev_);
    const auto [rows, C] = rows_of(ck, "x", x);
    ck.shape("y", y, x.shape());
    forward_impl(rows, C, x, y);
  }
  // dx = y * (dy - sum(dy * y)) over the last axis
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
    const shape_checks::Checks ck(kName, dev_);
    const auto [rows, C] = rows_of(ck, "y", y);
    ck.shape("dy", dy, y.shape());
    ck.shape("dx", dx, y.shape());
    backward_impl(rows, C, y, dy, dx);
  }
  // Cross-entropy of softmax(logits) [N,C] (f32) against labels: i32 class indices [N] or f32
  // probabilities (one-hot) [N,C], each target smoothed by the kernel's label_smoothing (the loss
  // is the smoothed loss). Writes dlogits = (softmax - target) * grad_scale when dlogits is defined
  // (grad_scale is 1/global batch for a mean loss). A class index outside [0, C) (other than an
  // ignored one) throws std::out_of_range naming the sample. The count is the rows scored: N less
  // the index labels equal to an ignored class.
  LossStats cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, float grad_scale) {
    const auto [N, C, sparse] = check_xent(logits, labels, dlogits);
    return cross_entropy_impl(N, C, sparse, logits, labels, dlogits, grad_scale);
  }
  // The same for a recorded step: grad_scale is read from step->loss_scale where the kernels run,
  // and the batch's statistics are added to `sums`, both in the context's memory (device memory on
  // a GPU: no host synchronisation; an out-of-range label is then noted in sums, not thrown).
  // `scale_mul` multiplies that scale (1/T for a loss averaged over T positions per sample).
  void cross_entropy_into(const Tensor& logits, const Tensor& labels, Tensor& dlogits, const StepScalars* step,
                          LossSums* sums, float scale_mul = 1.0f) {
    const auto [N, C, sparse] = check_xent(logits, labels, dlogits);
    cross_entropy_into_impl(N, C, sparse, logits, labels, dlogits, step, scale_mul, sums);
  }

 protected:
  SoftmaxKernel(const OpContext& c, const Params& p)
      : label_smoothing_(p.label_smoothing),
        ignore_(p.ignore),
        ignore_class_(p.ignore_class),
        class_weight_(p.class_weight),
        dev_(c.device()) {
    if (!(p.label_smoothing >= 0.0f && p.label_smoothing <= 1.0f))
      shape_checks::Checks(kName, dev_).fail("label_smoothing must be in [0, 1], got ", p.label_smoothing);
  }
  const float label_smoothing_;
  const bool ignore_;            // an index label equal to ignore_class_ is not scored
  const int32_t ignore_class_;
  const float* const class_weight_;  // [C] or nullptr (SoftmaxParams)
  // Called with checked arguments only: x (y) seen as [rows, C] (rows = 0 when C == 0); logits
  // [N, C] with C >= 1, labels i32 [N] when sparse, else f32 [N, C].
  virtual void forward_impl(int64_t rows, int64_t C, const Tensor& x, Tensor& y) = 0;
  virtual void backward_impl(int64_t rows, int64_t C, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  virtual LossStats cross_entropy_impl(int64_t N, int64_t C, bool sparse, const Tensor& logits, const Tensor& labels,
                                       Tensor& dlogits, float grad_scale) = 0;
  // Host memory (the CPU, which runs ops as they are called): cross_entropy_impl with the scale
  // read now (times scale_mul), its statistics added (an out-of-range label throws, as in cross_entropy).
  virtual void cross_entropy_into_impl(int64_t N, int64_t C, bool sparse, const Tensor& logits, const Tensor& labels,
                                       Tensor& dlogits, const StepScalars* step, float scale_mul, LossSums* sums) {
    add_to(*sums, cross_entropy_impl(N, C, sparse, logits, labels, dlogits, step->loss_scale * scale_mul));
  }

 private:
  struct XentShape {
    int64_t N, C;
    bool sparse;
  };
  XentShape check_xent(const Tensor& logits, const Tensor& labels, const Tensor& dlogits) const {
    const shape_checks::Checks ck("cross_entropy", dev_);
    ck.dtype("logits", logits, DType::F32);
    ck.has_rank("logits", logits, 2);
    const int64_t N = logits.dim(0), C = logits.dim(1);
    if (C == 0) ck.fail("logits have no classes");
    ck.defined("labels", labels);
    const bool sparse = labels.dtype() == DType::I32;
    if (sparse) {
      ck.on_device("labels", labels);
      if (labels.shape() != Shape{N})
        ck.fail("i32 labels have shape [", labels.shape().str(), "], expected [", N, "]");
    } else {
      ck.shape("labels", labels, logits.shape());
    }
    if (dlogits.defined()) ck.shape("dlogits", dlogits, logits.shape());
    return {N, C, sparse};
  }
  static std::pair<int64_t, int64_t> rows_of(const shape_checks::Checks& ck, const char* name, const Tensor& t) {
    ck.dtype(name, t, DType::F32);
    ck.min_rank(name, t, 1);
    return shape_checks::rows_by_last(t);
  }
  Device dev_;
};

}  // namespace trainer
