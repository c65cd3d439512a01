// Config expansion bounds: a memoised count of the values a YAML graph stands for, and its depth.
#include "core/io/config_bounds.h"

#include <fmt/format.h>

#include <map>
#include <utility>
#include <vector>

#include "core/io/config.h"

namespace trainer::cfg {
namespace {

class ExpansionCounter {
 public:
  ExpansionCounter(std::string file, std::string fixed) : file_(std::move(file)), fixed_(std::move(fixed)) {}

  // Values `n` stands for (itself included), each alias use counted; throws past the bounds.
  int64_t count(const YAML::Node& n, int depth) {
    if (!n.IsDefined()) return 0;
    if (depth > kMaxConfigDepth)
      fail(n, fmt::format("lists and maps nest more than {} deep here; a config is not that deep", kMaxConfigDepth));
    if (const int64_t* seen = memo(n)) return *seen;
    int64_t total = 1;
    if (n.IsSequence()) {
      for (const YAML::Node& c : n) total += count(c, depth + 1);
    } else if (n.IsMap()) {
      for (auto it = n.begin(); it != n.end(); ++it) total += count(it->first, depth + 1) + count(it->second, depth + 1);
    }
    if (total > kMaxConfigValues)
      fail(n, fmt::format("this value expands to {} values (aliases count at each use); a config may hold at "
                          "most {}", with_commas(total), with_commas(kMaxConfigValues)));
    remember(n, total);
    return total;
  }

 private:
  // Aliased values are the same node: found again by their position, then by identity.
  const int64_t* memo(const YAML::Node& n) const {
    auto it = memo_.find(n.Mark().pos);
    if (it == memo_.end()) return nullptr;
    for (const auto& [node, total] : it->second)
      if (node.is(n)) return &total;
    return nullptr;
  }
  void remember(const YAML::Node& n, int64_t total) { memo_[n.Mark().pos].emplace_back(n, total); }

  [[noreturn]] void fail(const YAML::Node& n, const std::string& message) const {
    if (!fixed_.empty()) throw ConfigError(fixed_, message);
    const YAML::Mark m = n.Mark();
    if (m.is_null() || m.line < 0) throw ConfigError(file_, message);
    throw ConfigError(fmt::format("{}:{}:{}", file_, m.line + 1, m.column + 1), message);
  }

  static std::string with_commas(int64_t v) {
    std::string s = std::to_string(v);
    for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
    return s;
  }

  std::string file_, fixed_;
  std::map<int, std::vector<std::pair<YAML::Node, int64_t>>> memo_;
};

}  // namespace

void check_expansion(const YAML::Node& root, const std::string& where_prefix, const std::string& fixed_where) {
  ExpansionCounter(where_prefix, fixed_where).count(root, 0);
}

}  // namespace trainer::cfg
