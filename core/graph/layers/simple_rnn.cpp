// simple_rnn layer (Keras SimpleRNN): units, activation (tanh, relu, sigmoid, linear), return_sequences, use_bias on a (steps, features) input.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/simple_rnn.h"

namespace trainer {
namespace {

class SimpleRnn final : public Layer {
 public:
  TRAINER_LAYER_CLONE(SimpleRnn)
  explicit SimpleRnn(cfg::MapReader& r) {
    p_.units = r.get_int("units", std::nullopt, 1, 1 << 16);
    p_.return_sequences = r.get<bool>("return_sequences", false);
    p_.bias = r.get<bool>("use_bias", true);
    activation_ = r.get_choice("activation", {"tanh", "relu", "sigmoid", "linear"}, "tanh");
    using simple_rnn_math::Act;
    p_.activation = activation_ == "relu" ? Act::Relu : activation_ == "sigmoid" ? Act::Sigmoid
                                                      : activation_ == "linear" ? Act::Linear : Act::Tanh;
    kernel_init_ = read_initializer(r, "kernel_initializer", "glorot_uniform");
    recurrent_init_ = read_initializer(r, "recurrent_initializer", "orthogonal");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
  }
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != 2)
      spec().fail(fmt::format("simple_rnn '{}' needs a (steps, features) input, got {}; an embedding layer makes one "
                              "from token ids, a recurrent layer with return_sequences: true from another",
                              name(), in[0].str()));
    steps_ = in[0][0];
    features_ = in[0][1];
    return p_.return_sequences ? Shape{steps_, p_.units} : Shape{p_.units};
  }
  // Keras's weights: kernel [F, U], recurrent_kernel [U, U], bias [U].
  std::vector<ParamSpec> params() const override {
    const int64_t U = p_.units;
    std::vector<ParamSpec> ps{{"kernel", Shape{features_, U}, kernel_init_, true},
                              {"recurrent_kernel", Shape{U, U}, recurrent_init_, true}};
    if (p_.bias) ps.push_back({"bias", Shape{U}, bias_init_, true});
    return ps;
  }
  // Per step: the input and recurrent products (2·U·(F + U)), the bias and the activation (~2U).
  int64_t flops() const override {
    const int64_t U = p_.units;
    return steps_ * (2 * U * (features_ + U) + 2 * U);
  }
  LayerConfig describe() const override {
    return LayerConfig()
        .put_int("units", p_.units)
        .put_int("return_sequences", p_.return_sequences)
        .put_int("use_bias", p_.bias)
        .put_text("activation", activation_);
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<SimpleRnnKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    k_->forward(*x[0], params_[0], params_[1], p_.bias ? params_[2] : Tensor(), y, training);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = p_.bias ? grads_[2] : Tensor();
    k_->backward(*x[0], params_[0], params_[1], dy, *dx[0], grads_[0], grads_[1], db);
  }

 private:
  SimpleRnnParams p_;
  std::string activation_;
  Initializer kernel_init_, recurrent_init_, bias_init_;
  int64_t steps_ = 0, features_ = 0;
  KernelSlot<SimpleRnnKernel> k_;
};

RegisterLayer<SimpleRnn> reg("simple_rnn", "SimpleRNN");

}  // namespace
}  // namespace trainer
