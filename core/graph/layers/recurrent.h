// The recurrent layers' shared part (lstm, gru, simple_rnn): Keras's common keys, the (steps, features) input, the weights kernel, recurrent_kernel and bias, the kernel's forward.
#pragma once
#include <fmt/format.h>

#include "core/graph/layers/common.h"

namespace trainer {

// Kernel: LstmKernel, GruKernel or SimpleRnnKernel, whose Params hold units, return_sequences and
// bias. `gates` blocks of U columns in kernel [F, gates·U] and recurrent_kernel [U, gates·U], as
// Keras stores them; the bias's shape is the subclass's (bias_shape()).
template <class Kernel>
class RecurrentLayer : public Layer {
 public:
  Shape infer(const std::vector<Shape>& in) override {
    if (in[0].rank() != 2)
      spec().fail(fmt::format("{} '{}' needs a (steps, features) input, got {}; an embedding layer makes one from "
                              "token ids, a recurrent layer with return_sequences: true from another",
                              type(), name(), in[0].str()));
    steps_ = in[0][0];
    features_ = in[0][1];
    return p_.return_sequences ? Shape{steps_, p_.units} : Shape{p_.units};
  }
  // Keras's weights and default initialisers: kernel glorot_uniform, recurrent_kernel orthogonal,
  // bias zeros.
  std::vector<ParamSpec> params() const override {
    const int64_t G = gates_ * p_.units;
    std::vector<ParamSpec> ps{{"kernel", Shape{features_, G}, kernel_init_, true},
                              {"recurrent_kernel", Shape{p_.units, G}, recurrent_init_, true}};
    if (p_.bias) ps.push_back({"bias", bias_shape(), bias_init_, true});
    return ps;
  }
  void bind(OpContext& ctx, std::vector<Tensor> params, std::vector<Tensor> grads) override {
    Layer::bind(ctx, std::move(params), std::move(grads));
    k_ = make_kernel<Kernel>(ctx, p_);
  }
  void forward(const std::vector<const Tensor*>& x, Tensor& y, bool training) override {
    k_->forward(*x[0], params_[0], params_[1], p_.bias ? params_[2] : Tensor(), y, training);
  }

 protected:
  // Reads units, return_sequences, use_bias and the three initialisers.
  RecurrentLayer(cfg::MapReader& r, int64_t gates) : gates_(gates) {
    p_.units = r.get_int("units", std::nullopt, 1, 1 << 16);
    p_.return_sequences = r.get<bool>("return_sequences", false);
    p_.bias = r.get<bool>("use_bias", true);
    kernel_init_ = read_initializer(r, "kernel_initializer", "glorot_uniform");
    recurrent_init_ = read_initializer(r, "recurrent_initializer", "orthogonal");
    bias_init_ = read_initializer(r, "bias_initializer", "zeros");
  }
  virtual Shape bias_shape() const { return Shape{gates_ * p_.units}; }
  // units, return_sequences and use_bias; the subclass adds its activations.
  LayerConfig describe_common() const {
    return LayerConfig().put_int("units", p_.units).put_int("return_sequences", p_.return_sequences).put_int("use_bias", p_.bias);
  }
  // The weight gradients' views in params() order, the bias's undefined without one.
  Tensor bias_grad() const { return p_.bias ? grads_[2] : Tensor(); }

  typename Kernel::Params p_;
  int64_t gates_;
  Initializer kernel_init_, recurrent_init_, bias_init_;
  int64_t steps_ = 0, features_ = 0;
  KernelSlot<Kernel> k_;
};

}  // namespace trainer
