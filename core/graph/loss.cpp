// The registered losses: (sparse) categorical cross-entropy over softmax, binary cross-entropy over sigmoid, each with label smoothing.
#include "core/graph/loss.h"

#include <fmt/format.h>

#include <map>

#include "core/ops/sigmoid_xent.h"

namespace trainer {
namespace {

std::map<std::string, LossFactory>& losses() {
  static std::map<std::string, LossFactory> m;
  return m;
}

class SoftmaxCrossEntropy final : public Loss {
 public:
  SoftmaxCrossEntropy(OpContext& ctx, float ls) : k_(make_kernel<SoftmaxKernel>(ctx, {ls})) {}
  LossStats compute(const Tensor& logits, const Tensor& labels, Tensor& dlogits, float scale) override {
    return k_->cross_entropy(logits, labels, dlogits, scale);
  }
  void compute_into(const Tensor& logits, const Tensor& labels, Tensor& dlogits, const StepScalars* step,
                    LossSums* sums) override {
    k_->cross_entropy_into(logits, labels, dlogits, step, sums);
  }
  const char* fused_output() const override { return "softmax"; }
  std::string check_logits(const Shape& s) const override {
    return s.rank() == 1 ? "" : fmt::format("the model output must be a vector of class scores, got {}", s.str());
  }

 private:
  std::unique_ptr<SoftmaxKernel> k_;
};

class BinaryCrossEntropy final : public Loss {
 public:
  BinaryCrossEntropy(OpContext& ctx, float ls) : k_(make_kernel<SigmoidXentKernel>(ctx, {ls})) {}
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
  std::unique_ptr<SigmoidXentKernel> k_;
};

const bool registered = [] {
  // Labels are class indices for both categorical names (Keras' one-hot form is not read).
  // Label smoothing on an index label smooths its one-hot target (Keras's CategoricalCrossentropy,
  // PyTorch's CrossEntropyLoss).
  const auto softmax_xent = [](OpContext& c, float ls) { return std::make_unique<SoftmaxCrossEntropy>(c, ls); };
  register_loss("sparse_categorical_crossentropy", softmax_xent);
  register_loss("categorical_crossentropy", softmax_xent);
  register_loss("binary_crossentropy", [](OpContext& c, float ls) { return std::make_unique<BinaryCrossEntropy>(c, ls); });
  return true;
}();

}  // namespace

void register_loss(const std::string& name, LossFactory f) { losses()[name] = std::move(f); }

std::vector<std::string> loss_names() {
  std::vector<std::string> n;
  for (const auto& [k, v] : losses()) n.push_back(k);
  return n;
}

std::unique_ptr<Loss> make_loss(const std::string& name, OpContext& ctx, float label_smoothing) {
  auto it = losses().find(name);
  if (it == losses().end()) throw std::invalid_argument("unknown loss " + name);
  return it->second(ctx, label_smoothing);
}

LossHead loss_head(const Graph& g, const Loss& loss) {
  int out = g.output_node();
  const GraphNode& n = g.nodes()[size_t(out)];
  LossHead h;
  h.fused = n.layer->type() == loss.fused_output() && !is_model_input(n.inputs[0]);
  h.logits = h.fused ? n.inputs[0] : out;
  std::string bad = loss.check_logits(g.nodes()[size_t(h.logits)].shape);
  if (!bad.empty()) n.layer->spec().fail(bad);
  return h;
}

}  // namespace trainer
