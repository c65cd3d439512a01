// gru layer (Keras GRU, reset_after): units, return_sequences, use_bias on a (steps, features) input.
#include <fmt/format.h>

#include "core/graph/layers/common.h"
#include "core/ops/gru.h"

namespace trainer {
namespace {

class Gru final : public Layer {
 public:
  TRAINER_LAYER_CLONE(Gru)
  explicit Gru(cfg::MapReader& r) {
    p_.units = r.get_int("units", std::nullopt, 1, 1 << 16);
    p_.return_sequences = r.get<bool>("return_sequences", false);
    p_.bias = r.get<bool>("use_bias", true);
    // Keras 3's default (and TensorFlow 2's, cuDNN's): the reset gate applied after the recurrent
    // projection. reset_after: false (Keras 1's form, one bias row) is not here.
    if (!r.get<bool>("reset_after", true))
      r.required("reset_after").fail("gru: only reset_after: true (Keras's default) is implemented");
    kernel_init_ = read_initializer(r, "kernel_initializer", "glorot_uniform");
    recurrent_init_ = read_initializer(r, "recurrent_initializer", "orthogonal");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
  }
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != 2)
      spec().fail(fmt::format("gru '{}' needs a (steps, features) input, got {}; an embedding layer makes one from "
                              "token ids, a gru or lstm with return_sequences: true from another",
                              name(), in[0].str()));
    steps_ = in[0][0];
    features_ = in[0][1];
    return p_.return_sequences ? Shape{steps_, p_.units} : Shape{p_.units};
  }
  // Keras's weights: kernel [F, 3U], recurrent_kernel [U, 3U], bias [2, 3U] (the input row, then
  // the recurrent one); columns [z | r | h].
  std::vector<ParamSpec> params() const override {
    const int64_t U = p_.units, G = 3 * U;
    std::vector<ParamSpec> ps{{"kernel", Shape{features_, G}, kernel_init_, true},
                              {"recurrent_kernel", Shape{U, G}, recurrent_init_, true}};
    if (p_.bias) ps.push_back({"bias", Shape{2, G}, bias_init_, true});
    return ps;
  }
  // Per step: the input and recurrent products (2·3U·(F + U)), the biases (6U), the gates (3U) and
  // the updates (~6U).
  int64_t flops() const override {
    const int64_t U = p_.units;
    return steps_ * (6 * U * (features_ + U) + 15 * U);
  }
  LayerConfig describe() const override {
    return LayerConfig()
        .put_int("units", p_.units)
        .put_int("return_sequences", p_.return_sequences)
        .put_int("use_bias", p_.bias)
        .put_int("reset_after", 1)
        .put_text("activation", "tanh")
        .put_text("recurrent_activation", "sigmoid");
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<GruKernel>(ctx, p_);
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
  GruParams p_;
  Initializer kernel_init_, recurrent_init_, bias_init_;
  int64_t steps_ = 0, features_ = 0;
  KernelSlot<GruKernel> k_;
};

RegisterLayer<Gru> reg("gru", "GRU");

}  // namespace
}  // namespace trainer
