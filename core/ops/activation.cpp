// Activation names (shared by every backend and the config parser).
#include "core/ops/activation.h"

namespace trainer {

static const char* const kActNames[] = {"linear", "relu", "relu6", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", nullptr};

std::optional<ActKind> parse_activation(const std::string& name) {
  if (name == "swish") return ActKind::Silu;  // Keras's other name for it
  for (int i = 0; kActNames[i]; ++i)
    if (name == kActNames[i]) return ActKind(i);
  return std::nullopt;
}

const char* activation_name(ActKind k) { return kActNames[int(k)]; }
const char* const* activation_names() { return kActNames; }

}  // namespace trainer
