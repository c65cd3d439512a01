// Helpers for the graph tests: a graph from YAML text, and the config error it produces.
#pragma once
#include <string>

#include "core/graph/executor.h"
#include "core/graph/graph.h"

namespace trainer::test {

inline Graph build(const std::string& yaml) {
  auto doc = cfg::parse_document(yaml, "test.yaml");
  return Graph(parse_model(cfg::root(doc).child("model")));
}

// The error a config produces, as "where: message".
inline std::string error_of(const std::string& yaml) {
  try {
    build(yaml);
  } catch (const cfg::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace trainer::test
