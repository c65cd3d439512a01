// --set overrides: one "a.b=value" applied to a config's YAML tree, every node it brings in remembered for messages.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/depthguard.h>

#include <functional>
#include <set>
#include <sstream>

#include "core/io/config_bounds.h"
#include "core/io/config_text.h"
#include "core/io/yaml_tree.h"

namespace trainer::cfg {

void apply_override(DocumentTree& doc, const std::string& text) {
  size_t eq = text.find('=');
  std::string where = "--set " + printable(text);  // one line, whatever the shell passed
  if (eq == std::string::npos || eq == 0) throw ConfigError(where, "expected key=value, e.g. --set optimizer.lr=0.01");
  std::string path = text.substr(0, eq), value = text.substr(eq + 1);
  YAML::Node v;
  try {
    v = YAML::Load(value);
  } catch (const YAML::DeepRecursion&) {
    throw ConfigError(where, fmt::format("lists and maps nest more than {} deep in the value", kMaxConfigDepth));
  } catch (const YAML::Exception& e) {
    throw ConfigError(where, "cannot parse the value as YAML: " + e.msg);
  }
  if (!v.IsDefined()) v = YAML::Node(YAML::NodeType::Null);
  check_expansion(v, "", where);
  // A key given twice inside the value (yaml-cpp keeps both; lookups would see only the first).
  std::function<void(const YAML::Node&)> no_repeats = [&](const YAML::Node& n) {
    if (n.IsSequence())
      for (const YAML::Node& c : n) no_repeats(c);
    if (!n.IsMap()) return;
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (it->first.IsScalar() && !seen.insert(it->first.Scalar()).second)
        throw ConfigError(where, fmt::format("duplicate key '{}' in the value", printable(it->first.Scalar())));
      no_repeats(it->second);
    }
  };
  no_repeats(v);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw ConfigError(where, "empty component in key '" + path + "'");
    parts.push_back(p);
  }
  Override o{printable(text), v, {}};
  std::function<void(const YAML::Node&)> collect = [&](const YAML::Node& n) {
    o.nodes.push_back(n);
    if (n.IsSequence())
      for (const YAML::Node& c : n) collect(c);
    if (n.IsMap())
      for (auto it = n.begin(); it != n.end(); ++it) collect(it->first), collect(it->second);
  };
  collect(v);
  // The key `p` of map `m`, which this override has just created.
  auto created_key = [&](const YAML::Node& m, const std::string& p) {
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == p) o.nodes.push_back(it->first);
  };
  if (!doc.root.IsDefined() || doc.root.IsNull()) doc.root = YAML::Node(YAML::NodeType::Map);
  YAML::Node cur = doc.root;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    bool last = i + 1 == parts.size();
    if (cur.IsSequence()) {
      int64_t idx = -1;
      if (!parse_int(p, idx) || idx < 0 || idx >= int64_t(cur.size()))
        throw ConfigError(where, fmt::format("'{}' is a list of {} items; '{}' is not an index into it",
                                             fmt::join(parts.begin(), parts.begin() + long(i), "."), cur.size(), p));
      if (last) {
        cur[size_t(idx)] = v;
      } else {
        cur.reset(cur[size_t(idx)]);
      }
      continue;
    }
    if (!cur.IsMap()) {
      if (cur.IsNull()) cur = YAML::Node(YAML::NodeType::Map);
      else
        throw ConfigError(where, fmt::format("'{}' is a single value; it has no key '{}'",
                                             fmt::join(parts.begin(), parts.begin() + long(i), "."), p));
    }
    const YAML::Node& ccur = cur;
    bool fresh = !ccur[p].IsDefined();  // const access: never inserts
    if (last) {
      cur[p] = v;
    } else {
      if (!cur[p].IsDefined() || cur[p].IsNull()) cur[p] = YAML::Node(YAML::NodeType::Map);
    }
    if (fresh) created_key(cur, p);
    if (!last) {
      YAML::Node next = cur[p];
      cur.reset(next);
    }
  }
  doc.overrides.push_back(std::move(o));
}


}  // namespace trainer::cfg
