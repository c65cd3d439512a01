// Private to core/io: the YAML tree behind cfg::Document and cfg::Node (the only header besides core/io's own checks that includes the YAML library).
#pragma once
#include <yaml-cpp/yaml.h>

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

}  // namespace trainer::cfg
