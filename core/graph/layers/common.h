// Helpers shared by layer implementations: config readers for padding and initialisers.
#pragma once
#include "core/graph/layer.h"
#include "core/ops/window.h"

namespace trainer {

inline Padding read_padding(cfg::MapReader& r, const char* fallback) {
  return r.get_choice("padding", {"same", "valid"}, fallback) == "same" ? Padding::Same : Padding::Valid;
}

inline InitKind read_init(cfg::MapReader& r, const std::string& key, const char* fallback) {
  static const std::vector<std::string> names = {"zeros", "ones", "glorot_uniform", "glorot_normal",
                                                 "he_uniform", "he_normal", "lecun_normal"};
  std::string v = r.get_choice(key, names, fallback);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == v) return InitKind(i);
  return InitKind::Zeros;
}

// Undefined tensor for "no such input/parameter".
inline Tensor& none() {
  thread_local Tensor t;
  t = Tensor();
  return t;
}

}  // namespace trainer
