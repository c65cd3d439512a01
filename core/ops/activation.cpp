// Activation names (shared by every backend and the config parser).
#include "core/ops/activation.h"

namespace trainer {

static const char* const kActNames[] = {"linear",     "relu", "relu6", "sigmoid",  "tanh",         "gelu",
                                        "gelu_tanh",  "silu", "leaky_relu", "elu", "selu", "softplus",
                                        "hard_sigmoid", "hard_silu", "mish", nullptr};

std::optional<ActKind> parse_activation(const std::string& name) {
  if (name == "swish") return ActKind::Silu;  // Keras's other names for them
  if (name == "hard_swish") return ActKind::HardSilu;
  for (int i = 0; kActNames[i]; ++i)
    if (name == kActNames[i]) return ActKind(i);
  return std::nullopt;
}

const char* activation_name(ActKind k) { return kActNames[int(k)]; }
const char* const* activation_names() { return kActNames; }

float default_alpha(ActKind k) { return k == ActKind::LeakyRelu ? 0.2f : k == ActKind::Elu ? 1.0f : 0.0f; }

}  // namespace trainer
