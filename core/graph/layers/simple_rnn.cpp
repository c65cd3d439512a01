// simple_rnn layer (Keras SimpleRNN): units, activation (tanh, relu, sigmoid, linear), return_sequences, use_bias on a (steps, features) input.
#include "core/graph/layers/recurrent.h"
#include "core/ops/simple_rnn.h"

namespace trainer {
namespace {

class SimpleRnn final : public RecurrentLayer<SimpleRnnKernel> {
 public:
  TRAINER_LAYER_CLONE(SimpleRnn)
  explicit SimpleRnn(cfg::MapReader& r) : RecurrentLayer(r, 1) {
    activation_ = r.get_choice("activation", {"tanh", "relu", "sigmoid", "linear"}, "tanh");
    using simple_rnn_math::Act;
    p_.activation = activation_ == "relu" ? Act::Relu : activation_ == "sigmoid" ? Act::Sigmoid
                                                      : activation_ == "linear" ? Act::Linear : Act::Tanh;
  }
  // Per step: the input and recurrent products (2·U·(F + U)), the bias and the activation (~2U).
  int64_t flops() const override {
    const int64_t U = p_.units;
    return steps_ * (2 * U * (features_ + U) + 2 * U);
  }
  LayerConfig describe() const override { return describe_common().put_text("activation", activation_); }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = bias_grad();
    k_->backward(*x[0], params_[0], params_[1], dy, *dx[0], grads_[0], grads_[1], db);
  }

 private:
  std::string activation_;
};

RegisterLayer<SimpleRnn> reg("simple_rnn", "SimpleRNN");

}  // namespace
}  // namespace trainer
