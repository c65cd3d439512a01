// Private to core/io: the YAML tree behind cfg::Document and cfg::Node (the only header besides core/io's own checks that includes the YAML library).
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/config.h"

namespace trainer::cfg {

struct Override {
  std::string text;  // "optimizer.lr=0.01" as given
  YAML::Node node;   // the value node it put into the tree
  // Every node the override brought in: the value's descendants and the keys it created
  // ("--set trian.epochs=3" adds the key 'trian'), so messages about them name the --set.
  std::vector<YAML::Node> nodes;
};

struct DocumentTree {
  YAML::Node root;
  std::vector<Override> overrides;
};

struct NodeRef {
  YAML::Node node;
  explicit NodeRef(YAML::Node n) : node(std::move(n)) {}
};

// The YAML node behind a handle (an undefined node for an empty handle).
inline const YAML::Node& yaml_of(const Node& n) {
  static const YAML::Node undefined(YAML::NodeType::Undefined);
  return n.ref() ? n.ref()->node : undefined;
}

// A whole decimal integer (no trailing text); `overflow` says when it is one but out of range.
inline bool parse_int(const std::string& s, int64_t& out, bool* overflow = nullptr) {
  if (s.empty()) return false;
  size_t pos = 0;
  try {
    long long v = std::stoll(s, &pos, 10);
    if (pos != s.size()) return false;
    out = v;
    return true;
  } catch (const std::out_of_range&) {
    if (overflow) *overflow = s.find_first_not_of("+-0123456789") == std::string::npos;
    return false;
  } catch (...) {
    return false;
  }
}

// Applies one --set "a.b=value" to the tree (ConfigError naming the override).
void apply_override(DocumentTree& doc, const std::string& text);

}  // namespace trainer::cfg
