// lstm layer (Keras LSTM): units, return_sequences, use_bias, unit_forget_bias on a (steps, features) input.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/lstm.h"

namespace trainer {
namespace {

class Lstm final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Lstm)
  explicit Lstm(cfg::MapReader& r) {
    p_.units = r.get_int("units", std::nullopt, 1, 1 << 16);
    p_.return_sequences = r.get<bool>("return_sequences", false);
    p_.bias = r.get<bool>("use_bias", true);
    unit_forget_bias_ = r.get<bool>("unit_forget_bias", true);
    kernel_init_ = read_initializer(r, "kernel_initializer", "glorot_uniform");
    recurrent_init_ = read_initializer(r, "recurrent_initializer", "orthogonal");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
    bias_init_.forget_gate_ones = unit_forget_bias_;
  }
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != 2)
      spec().fail(fmt::format("lstm '{}' needs a (steps, features) input, got {}; an embedding layer makes one from "
                              "token ids, an lstm with return_sequences: true from another lstm",
                              name(), in[0].str()));
    steps_ = in[0][0];
    features_ = in[0][1];
    return p_.return_sequences ? Shape{steps_, p_.units} : Shape{p_.units};
  }
  // Keras' weights and default initialisers: kernel glorot_uniform, recurrent_kernel orthogonal,
  // bias zeros with the forget gate's quarter at 1 (unit_forget_bias).
  std::vector<ParamSpec> params() const override {
    const int64_t U = p_.units, G = 4 * U;
    std::vector<ParamSpec> ps{{"kernel", Shape{features_, G}, kernel_init_, true},
                              {"recurrent_kernel", Shape{U, G}, recurrent_init_, true}};
    if (p_.bias) ps.push_back({"bias", Shape{G}, bias_init_, true});
    return ps;
  }
  // Per step: the input and recurrent products (2·4U·(F + U)), the bias (4U), the gate
  // activations (4U) and the cell and output updates (5U).
  int64_t flops() const override {
    const int64_t U = p_.units;
    return steps_ * (8 * U * (features_ + U) + 13 * U);
  }
  // Keras' defaults, the only ones the layer has: activation tanh, recurrent_activation sigmoid.
  LayerConfig describe() const override {
    return LayerConfig()
        .put_int("units", p_.units)
        .put_int("return_sequences", p_.return_sequences)
        .put_int("use_bias", p_.bias)
        .put_text("activation", "tanh")
        .put_text("recurrent_activation", "sigmoid");
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<LstmKernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    k_->forward(*x[0], params_[0], params_[1], p_.bias ? params_[2] : Tensor(), y, training);
  }
  void backward(const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Tensor db = p_.bias ? grads_[2] : Tensor();
    k_->backward(*x[0], params_[0], params_[1], y, dy, *dx[0], grads_[0], grads_[1], db);
  }

 private:
  LstmParams p_;
  bool unit_forget_bias_ = true;
  Initializer kernel_init_, recurrent_init_, bias_init_;
  int64_t steps_ = 0, features_ = 0;
  KernelSlot<LstmKernel> k_;
};

RegisterLayer<Lstm> reg("lstm", "LSTM");

}  // namespace
}  // namespace trainer
