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
enum class ActKind { Linear, Relu, Relu6, Sigmoid, Tanh, Gelu, GeluTanh, Silu };

// nullopt when unknown; "swish" is silu (Keras's alias).
std::optional<ActKind> parse_activation(const std::string& name);
const char* activation_name(ActKind k);
const char* const* activation_names();                            // null-terminated, for did-you-mean

// The derivative of relu, relu6, sigmoid and tanh is taken from the output: relu's y > 0 iff
// x > 0, relu6's 0 < y < 6 iff 0 < x < 6, sigmoid's y(1 - y), tanh's 1 - y^2. GELU's and SiLU's
// are not functions of y (neither is monotonic below 0): from x, which the graph keeps (no
// in-place run). Linear needs neither.
inline bool backward_reads_x(ActKind k) { return k == ActKind::Gelu || k == ActKind::GeluTanh || k == ActKind::Silu; }
inline bool backward_reads_y(ActKind k) { return k != ActKind::Linear && !backward_reads_x(k); }

struct ActivationParams {
  ActKind kind = ActKind::Relu;
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
  // dx overwritten (it may alias dy); relu, relu6, sigmoid and tanh read only y (see
  // backward_reads_y), so y may be computed over x (in place); gelu reads only x. dy and dx are of
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
