// Activation op family: element-wise nonlinearities and their derivatives.
#pragma once
#include <optional>
#include <string>

#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

// Gelu: x Φ(x), the exact (erf) form, Keras's gelu and PyTorch's default; GeluTanh: its tanh
// approximation (Keras's approximate=True, PyTorch's approximate='tanh', GPT-2's). Silu:
// x·sigmoid(x) (Keras's silu, also named swish; PyTorch's nn.SiLU: EfficientNet's, LLaMA's MLP).
// LeakyRelu, Elu, Selu, Softplus, HardSigmoid, HardSilu (hard_swish), Mish: Keras 3's
// keras.activations of those names (formulas: core/ops/math/activation_math.h).
enum class ActKind { Linear, Relu, Relu6, Sigmoid, Tanh, Gelu, GeluTanh, Silu,
                     LeakyRelu, Elu, Selu, Softplus, HardSigmoid, HardSilu, Mish };

// SELU's constants, Keras's (Klambauer et al.'s): scale·elu(x, alpha).
constexpr float kSeluAlpha = 1.67326324f, kSeluScale = 1.05070098f;

// nullopt when unknown; "swish" is silu and "hard_swish" hard_silu (Keras's aliases).
std::optional<ActKind> parse_activation(const std::string& name);
const char* activation_name(ActKind k);
const char* const* activation_names();                            // null-terminated, for did-you-mean
// ActivationParams::alpha of the activation function `k` named alone (keras.activations'
// defaults): leaky_relu's negative_slope 0.2, elu's alpha 1; 0 for the others (unused).
float default_alpha(ActKind k);

// The derivative of relu, relu6, sigmoid, tanh and leaky_relu is taken from the output: relu's
// y > 0 iff x > 0 (leaky_relu's too, its slope >= 0), relu6's 0 < y < 6 iff 0 < x < 6, sigmoid's
// y(1 - y), tanh's 1 - y^2. The others' from x, which the graph keeps (no in-place run): GELU's,
// SiLU's, hard_silu's and mish's are not functions of y (not monotonic below 0); elu's, selu's,
// softplus's and hard_sigmoid's are taken as TensorFlow's autodiff takes them. Linear needs neither.
inline bool backward_reads_y(ActKind k) {
  return k == ActKind::Relu || k == ActKind::Relu6 || k == ActKind::Sigmoid || k == ActKind::Tanh ||
         k == ActKind::LeakyRelu;
}
inline bool backward_reads_x(ActKind k) { return k != ActKind::Linear && !backward_reads_y(k); }

struct ActivationParams {
  ActKind kind = ActKind::Relu;
  float alpha = 0.0f;  // leaky_relu's negative slope (>= 0), elu's alpha; unused by the others
};

class ActivationKernel {
 public:
  using Params = ActivationParams;
  static constexpr const char* kName = "activation";
  virtual ~ActivationKernel() = default;
  ActivationKernel(const ActivationKernel&) = delete;
  ActivationKernel& operator=(const ActivationKernel&) = delete;

  // y = f(x): x of a float type, y of its shape and type (y may be x: in place).
  void forward(const Tensor& x, Tensor& y) {
    ck_.floating("x", x);
    ck_.like("y", y, x, x.shape());
    forward_impl(x, y);
  }
  // dx overwritten (it may alias dy); relu, relu6, sigmoid, tanh and leaky_relu read only y (see
  // backward_reads_y), so y may be computed over x (in place); the others read only x. dy and dx are of
  // the shape and type of the tensor read.
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
    const bool uses_y = backward_reads_y(p_.kind);
    const Tensor& in = uses_y ? y : x;
    ck_.floating(uses_y ? "y" : "x", in);
    ck_.like("dy", dy, in, in.shape());
    ck_.like("dx", dx, in, in.shape());
    backward_impl(in, dy, dx);
  }

 protected:
  ActivationKernel(const OpContext& c, const Params& p) : p_(p), ck_(kName, c.device()) {}
  // Called with checked arguments only. `in` is y where backward_reads_y, else x.
  virtual void forward_impl(const Tensor& x, Tensor& y) = 0;
  virtual void backward_impl(const Tensor& in, const Tensor& dy, Tensor& dx) = 0;

  const Params p_;

 private:
  shape_checks::Checks ck_;
};

}  // namespace trainer
