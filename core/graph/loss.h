// Losses by config name (`train.loss`): each computes the batch's loss sum, correct count and the
// gradient of its logits, and names the output layer it absorbs (Keras' softmax/sigmoid + cross-
// entropy are computed from the logits, exact and stable).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/ops/softmax.h"

namespace trainer {

class Loss {
 public:
  virtual ~Loss() = default;
  // dlogits (overwritten, = d(loss_sum * grad_scale)/dlogits) may be undefined in evaluation.
  virtual LossStats compute(const Tensor& logits, const Tensor& labels, Tensor& dlogits, float grad_scale) = 0;
  // The same in a recorded step: the scale read from step->loss_scale and the statistics added to
  // `sums` where the kernels run (device memory on a GPU, never copied to the host here).
  virtual void compute_into(const Tensor& logits, const Tensor& labels, Tensor& dlogits, const StepScalars* step,
                            LossSums* sums) = 0;
  // The activation layer type folded into the loss when it is the model's output ("softmax").
  virtual const char* fused_output() const = 0;
  // Why logits of this shape (without batch) cannot be scored, or "" when they can.
  virtual std::string check_logits(const Shape& s) const = 0;
};

// Where a model's loss is computed: the logits node, and whether the output layer (softmax or
// sigmoid) is folded into the loss (Keras' activation + cross-entropy, computed from logits).
struct LossHead {
  int logits = -1;
  bool fused = false;
};
// A config error (at the output layer) when the loss cannot score the model's output.
LossHead loss_head(const Graph& g, const Loss& loss);

// label_smoothing (train.label_smoothing, Keras's and PyTorch's): every registered loss smooths its
// targets by it (softmax_math.h, sigmoid_xent_math.h); the loss it reports is the smoothed loss.
// ignore_class (train.ignore_class: Keras's SparseCategoricalCrossentropy(ignore_class), PyTorch's
// ignore_index): the categorical losses score no row whose label is it (a pad position); the
// statistics count the rows scored, and the step divides the gradient by the labels scored over
// the global batch (scored_labels, loader.h), so the loss is the mean over the scored positions.
struct LossOptions {
  float label_smoothing = 0.0f;
  std::optional<int32_t> ignore_class;
  // One weight per class (Keras's class_weight expanded with 1s; binary_crossentropy's: 2), or
  // empty: the training loss's rows weighted by their class (SoftmaxParams::class_weight).
  std::vector<float> class_weight;
};
using LossFactory = std::function<std::unique_ptr<Loss>(OpContext&, const LossOptions&)>;
// index_labels: the loss scores class indices (so it takes an ignore_class).
void register_loss(const std::string& name, LossFactory f, bool index_labels = true);
std::vector<std::string> loss_names();
// Whether the loss `name` takes an ignore_class (the losses of class indices).
bool loss_takes_ignore_class(const std::string& name);
std::unique_ptr<Loss> make_loss(const std::string& name, OpContext& ctx, const LossOptions& o = {});

}  // namespace trainer
