// Activation op family: element-wise nonlinearities and their derivatives.
#pragma once
#include <optional>
#include <string>

#include "core/ops/registry.h"

namespace trainer {

enum class ActKind { Linear, Relu, Relu6, Sigmoid, Tanh };

std::optional<ActKind> parse_activation(const std::string& name);  // nullopt when unknown
const char* activation_name(ActKind k);
const char* const* activation_names();                            // null-terminated, for did-you-mean

// Every nonlinear kind's derivative is taken from its output: relu's y > 0 iff x > 0, relu6's
// 0 < y < 6 iff 0 < x < 6, sigmoid's y(1 - y), tanh's 1 - y^2. Linear needs neither.
inline bool backward_reads_y(ActKind k) { return k != ActKind::Linear; }

struct ActivationParams {
  ActKind kind = ActKind::Relu;
};

class ActivationKernel {
 public:
  using Params = ActivationParams;
  static constexpr const char* kName = "activation";
  virtual ~ActivationKernel() = default;
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  // dx overwritten (it may alias dy); the nonlinear kinds read only y (see backward_reads_y), so
  // y may be computed over x (in place).
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

}  // namespace trainer
