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

struct ActivationParams {
  ActKind kind = ActKind::Relu;
};

class ActivationKernel {
 public:
  using Params = ActivationParams;
  static constexpr const char* kName = "activation";
  virtual ~ActivationKernel() = default;
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  // dx overwritten; backward may use x or y (y for sigmoid/tanh).
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

}  // namespace trainer
