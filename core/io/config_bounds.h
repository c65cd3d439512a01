// Bounds on what a config may expand to (file size, nesting, values after YAML aliases), checked
// in time linear in the text before anything walks the document as a tree.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

namespace trainer::cfg {

constexpr uint64_t kMaxConfigBytes = uint64_t(4) << 20;  // a config file (sweeps' generated ones included)
constexpr int64_t kMaxConfigValues = 100000;  // scalars, lists and maps, each alias use counted
constexpr int kMaxConfigDepth = 64;           // lists and maps inside each other

// Throws ConfigError at `where_prefix:line:col` of the first value (deepest first) that nests
// deeper than kMaxConfigDepth or expands, aliases counted at every use, to more than
// kMaxConfigValues values. Shared (aliased) values are counted once each and reused, so a
// "billion laughs" document is refused in time proportional to its text. `where_prefix` is the
// file name; with `fixed_where` set (a --set value), every message names that instead.
void check_expansion(const YAML::Node& root, const std::string& where_prefix, const std::string& fixed_where = "");

}  // namespace trainer::cfg
