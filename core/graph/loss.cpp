// The registered losses: (sparse) categorical cross-entropy over softmax, binary cross-entropy over sigmoid, each with label smoothing.
#include "core/graph/loss.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/ops/activation.h"
#include "core/ops/sigmoid_xent.h"

namespace trainer {
namespace {

struct Registered {
  LossFactory make;
  bool index_labels = true;  // scores class indices: takes an ignore_class
};

// LossOptions::class_weight in the context's memory (undefined without weights).
Tensor class_weights(OpContext& ctx, const LossOptions& o) {
  if (o.class_weight.empty()) return Tensor();
  Tensor t = ctx.empty(Shape{int64_t(o.class_weight.size())});
  ctx.copy_from_host(t.data(), o.class_weight.data(), o.class_weight.size() * sizeof(float));
  return t;
}

std::map<std::string, Registered>& losses() {
  static std::map<std::string, Registered> m;
  return m;
}

// Logits [N, C] score a sample; logits [N, T, C] score each of its T positions (a language
// model's next token), against labels [N, T]: the rows are the N*T positions, the statistics count
// positions (the mean loss and accuracy are per position, Keras's sparse cross-entropy over a
// sequence output). The caller's gradient scale is 1/(the labels scored over the global batch):
// each scored position weighs the same, the mean over the step's positions.
class SoftmaxCrossEntropy final : public Loss {
 public:
  SoftmaxCrossEntropy(OpContext& ctx, const LossOptions& o)
      : weights_(class_weights(ctx, o)),
        k_(make_kernel<SoftmaxKernel>(ctx, {o.label_smoothing, o.ignore_class.has_value(), o.ignore_class.value_or(0),
                                            weights_.defined() ? weights_.f32() : nullptr})) {}
  LossStats compute(const Tensor& logits, const Tensor& labels, Tensor& dlogits, float scale) override {
    Rows r = rows(logits, labels, dlogits);
    check_weights(r.logits);
    return k_->cross_entropy(r.logits, r.labels, r.dlogits, scale);
  }
  void compute_into(const Tensor& logits, const Tensor& labels, Tensor& dlogits, const StepScalars* step,
                    LossSums* sums) override {
    Rows r = rows(logits, labels, dlogits);
    check_weights(r.logits);
    k_->cross_entropy_into(r.logits, r.labels, r.dlogits, step, sums);
  }
  const char* fused_output() const override { return "softmax"; }
  std::string check_logits(const Shape& s) const override {
    return s.rank() == 1 || s.rank() == 2
               ? ""
               : fmt::format("the model output must be a vector of class scores (or one per position, [time, "
                             "classes]), got {}",
                             s.str());
  }

 private:
  struct Rows {
    Tensor logits, labels, dlogits;
  };
  // Per-position logits as rows of positions (index labels only: [N, T]).
  static Rows rows(const Tensor& logits, const Tensor& labels, const Tensor& dlogits) {
    if (logits.shape().rank() != 3) return {logits, labels, dlogits};
    const int64_t N = logits.dim(0), T = logits.dim(1), C = logits.dim(2);
    if (labels.dtype() != DType::I32 || labels.shape() != Shape{N, T})
      throw std::invalid_argument(fmt::format("cross_entropy: logits {} score every position, so the labels must be "
                                              "class indices [{}, {}] (one per position), got {} {}",
                                              logits.shape().str(), N, T, dtype_name(labels.dtype()),
                                              labels.shape().str()));
    Rows r{logits.reshape(Shape{N * T, C}), labels.reshape(Shape{N * T}), Tensor()};
    if (dlogits.defined()) r.dlogits = dlogits.reshape(Shape{N * T, C});
    return r;
  }
  // The kernel reads a weight for each of the logits' classes.
  void check_weights(const Tensor& logits) const {
    if (weights_.defined() && logits.shape().rank() == 2 && weights_.numel() != logits.dim(1))
      throw std::invalid_argument(fmt::format("cross_entropy: {} class weights for logits of {} classes",
                                              weights_.numel(), logits.dim(1)));
  }
  Tensor weights_;  // [C] in the context's memory, or undefined
  std::unique_ptr<SoftmaxKernel> k_;
};

class BinaryCrossEntropy final : public Loss {
 public:
  BinaryCrossEntropy(OpContext& ctx, const LossOptions& o)
      : weights_(class_weights(ctx, o)),
        k_(make_kernel<SigmoidXentKernel>(ctx, {o.label_smoothing, weights_.defined() ? weights_.f32() : nullptr})) {
    if (weights_.defined() && weights_.numel() != 2)
      throw std::invalid_argument(fmt::format("binary_crossentropy: {} class weights, not 2", weights_.numel()));
  }
  LossStats compute(const Tensor& logits, const Tensor& labels, Tensor& dlogits, float scale) override {
    return k_->loss(logits, labels, dlogits, scale);
  }
  void compute_into(const Tensor& logits, const Tensor& labels, Tensor& dlogits, const StepScalars* step,
                    LossSums* sums) override {
    k_->loss_into(logits, labels, dlogits, step, sums);
  }
  const char* fused_output() const override { return "sigmoid"; }
  std::string check_logits(const Shape& s) const override {
    return s.rank() == 1 && s[0] == 1 ? "" : fmt::format("binary_crossentropy needs one output unit (shape 1), got {}", s.str());
  }

 private:
  Tensor weights_;  // [2] in the context's memory, or undefined
  std::unique_ptr<SigmoidXentKernel> k_;
};

const bool registered = [] {
  // Labels are class indices for both categorical names (Keras' one-hot form is not read).
  // Label smoothing on an index label smooths its one-hot target (Keras's CategoricalCrossentropy,
  // PyTorch's CrossEntropyLoss).
  const auto softmax_xent = [](OpContext& c, const LossOptions& o) { return std::make_unique<SoftmaxCrossEntropy>(c, o); };
  register_loss("sparse_categorical_crossentropy", softmax_xent);
  register_loss("categorical_crossentropy", softmax_xent);
  register_loss(
      "binary_crossentropy",
      [](OpContext& c, const LossOptions& o) {
        if (o.ignore_class) throw std::invalid_argument("binary_crossentropy takes no ignore_class");
        return std::make_unique<BinaryCrossEntropy>(c, o);
      },
      false);
  return true;
}();

}  // namespace

void register_loss(const std::string& name, LossFactory f, bool index_labels) {
  losses()[name] = Registered{std::move(f), index_labels};
}

std::vector<std::string> loss_names() {
  std::vector<std::string> n;
  for (const auto& [k, v] : losses()) n.push_back(k);
  return n;
}

bool loss_takes_ignore_class(const std::string& name) {
  auto it = losses().find(name);
  return it != losses().end() && it->second.index_labels;
}

std::unique_ptr<Loss> make_loss(const std::string& name, OpContext& ctx, const LossOptions& o) {
  auto it = losses().find(name);
  if (it == losses().end()) throw std::invalid_argument("unknown loss " + name);
  return it->second.make(ctx, o);
}

// The probabilities an output layer makes ("softmax", "sigmoid"), under either of its names (the
// shorthand layer, or `activation` with that function); "" for any other layer.
static std::string output_probabilities(const Layer& l) {
  std::string f = l.type();
  if (f == "activation" && l.activation()) f = activation_name(*l.activation());
  return f == "softmax" || f == "sigmoid" ? f : "";
}

LossHead loss_head(const Graph& g, const Loss& loss) {
  int out = g.output_node();
  const GraphNode& n = g.nodes()[size_t(out)];
  LossHead h;
  const std::string probs = output_probabilities(*n.layer);
  h.fused = probs == loss.fused_output() && !is_model_input(n.inputs[0]);
  // Another probability output would be taken as logits, and its activation applied twice.
  if (!probs.empty() && !h.fused && !is_model_input(n.inputs[0]))
    n.layer->spec().fail(fmt::format("the model's output '{}' is a {}, but this loss takes logits or a {} output (end "
                                     "the model with a {} layer, or with the logits)",
                                     n.layer->name(), probs, loss.fused_output(), loss.fused_output()));
  h.logits = h.fused ? n.inputs[0] : out;
  std::string bad = loss.check_logits(g.nodes()[size_t(h.logits)].shape);
  if (!bad.empty()) n.layer->spec().fail(bad);
  return h;
}

}  // namespace trainer
