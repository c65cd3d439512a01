// `init.from`: a replica's weights from a safetensors file, matched by parameter name (Keras'
// load_weights(by_name=True, skip_mismatch=...)) — for fine-tuning from another run.
#pragma once
#include <string>
#include <vector>

#include "core/checkpoint/model_state.h"
#include "core/io/config.h"

namespace trainer {

// `init:` — start from another run's weights (fine-tuning).
struct InitSpec {
  std::string from;            // a .safetensors file (a checkpoint or any file with our tensor names)
  bool skip_mismatch = false;  // parameters whose shape differs keep their initial values
  cfg::Node node;              // for messages
};
InitSpec read_init_spec(const cfg::Node& section);

// Loads what matches into `r` and returns lines for the console: how many were loaded, which
// parameters the file lacks (they keep their initial values) and which were skipped for their
// shape. A shape mismatch without skip_mismatch, or a file with no parameter of the model, is a
// ConfigError at init.from; an unreadable or corrupt file a FileError.
std::vector<std::string> init_from(const InitSpec& o, const std::string& base_dir, ModelState& r);

}  // namespace trainer
