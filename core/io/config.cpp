// Config documents: loading, --set overrides, typed scalar reads, locations and did-you-mean.
#include "core/io/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace trainer::cfg {

// ---- locations -------------------------------------------------------------------------------

std::string Node::where() const {
  if (!doc_) return "<config>";
  for (const Override& o : doc_->overrides)
    if (node_.IsDefined() && o.node.IsDefined() && node_.is(o.node)) return "--set " + o.text;
  YAML::Mark m = node_.IsDefined() ? node_.Mark() : YAML::Mark::null_mark();
  if (m.is_null() || m.line < 0) return doc_->file;
  return fmt::format("{}:{}:{}", doc_->file, m.line + 1, m.column + 1);
}

void Node::fail(const std::string& message) const { throw ConfigError(where(), message); }

// ---- scalars ---------------------------------------------------------------------------------

std::string Node::scalar() const {
  if (!node_.IsScalar()) fail(fmt::format("'{}' must be a single value", path_));
  return node_.Scalar();
}

namespace {

std::string shown(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  size_t pos = 0;
  try {
    long long v = std::stoll(s, &pos, 10);
    if (pos != s.size()) return false;
    out = v;
    return true;
  } catch (...) {
    return false;
  }
}

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  size_t pos = 0;
  try {
    out = std::stod(s, &pos);
    return pos == s.size() && std::isfinite(out);
  } catch (...) {
    return false;
  }
}

}  // namespace

template <>
std::string Node::as<std::string>() const {
  if (!node_.IsScalar()) fail(fmt::format("'{}' must be a string, not {}", path_, shown(node_)));
  return node_.Scalar();
}

template <>
int64_t Node::as<int64_t>() const {
  int64_t v = 0;
  if (!node_.IsScalar() || !parse_int(node_.Scalar(), v))
    fail(fmt::format("'{}' must be an integer, not {}", path_, shown(node_)));
  return v;
}

template <>
int Node::as<int>() const {
  int64_t v = as<int64_t>();
  if (v < INT32_MIN || v > INT32_MAX) fail(fmt::format("'{}' is out of range", path_));
  return int(v);
}

template <>
double Node::as<double>() const {
  double v = 0;
  if (!node_.IsScalar() || !parse_double(node_.Scalar(), v))
    fail(fmt::format("'{}' must be a number, not {}", path_, shown(node_)));
  return v;
}

template <>
float Node::as<float>() const {
  return float(as<double>());
}

template <>
bool Node::as<bool>() const {
  if (node_.IsScalar()) {
    const std::string& s = node_.Scalar();
    if (s == "true" || s == "True" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "False" || s == "no" || s == "off") return false;
  }
  fail(fmt::format("'{}' must be true or false, not {}", path_, shown(node_)));
}

// ---- sequences and maps ----------------------------------------------------------------------

size_t Node::size() const { return node_.IsSequence() || node_.IsMap() ? node_.size() : (defined() ? 1 : 0); }

Node Node::resolve(Node n) const {
  if (!env_ || !n.node_.IsScalar()) return n;
  const std::string& s = n.node_.Scalar();
  if (s.size() < 2 || s[0] != '$' || s == "$input" || s == "$inputs") return n;
  auto it = env_->find(s.substr(1));
  if (it == env_->end()) {
    std::vector<std::string> names;
    for (const auto& [k, v] : *env_) names.push_back("$" + k);
    n.fail(fmt::format("'{}' is not a parameter of this block{}", s, suggestion(s, names)));
  }
  Node bound = it->second;
  bound.path_ = n.path_;
  return bound;
}

Node Node::at(size_t i) const {
  if (!node_.IsSequence()) fail(fmt::format("'{}' must be a list, not {}", path_, shown(node_)));
  const YAML::Node& cn = node_;
  return resolve(Node(doc_, cn[i], fmt::format("{}[{}]", path_, i), env_));
}

std::vector<Node> Node::items() const {
  std::vector<Node> out;
  if (node_.IsSequence()) {
    for (size_t i = 0; i < node_.size(); ++i) out.push_back(at(i));
  } else if (defined()) {
    out.push_back(*this);
  }
  return out;
}

std::vector<std::string> Node::keys() const {
  std::vector<std::string> out;
  if (!node_.IsMap()) return out;
  for (auto it = node_.begin(); it != node_.end(); ++it) out.push_back(it->first.Scalar());
  return out;
}

bool Node::has(const std::string& key) const {
  if (!node_.IsMap()) return false;
  const YAML::Node& cn = node_;
  return cn[key].IsDefined();
}

Node Node::child(const std::string& key) const {
  std::string p = path_.empty() ? key : path_ + "." + key;
  if (!node_.IsMap()) return Node(doc_, YAML::Node(YAML::NodeType::Undefined), p);
  // const access: never inserts the key
  const YAML::Node& cn = node_;
  YAML::Node c = cn[key];  // const access never inserts; an absent key gives an invalid node
  if (!c.IsDefined()) return Node(doc_, YAML::Node(YAML::NodeType::Undefined), p, env_);
  return resolve(Node(doc_, c, p, env_));
}

// ---- did-you-mean ----------------------------------------------------------------------------

static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  std::string s = did_you_mean(word, candidates);
  return s.empty() ? "" : " (did you mean '" + s + "'?)";
}

// ---- MapReader -------------------------------------------------------------------------------

MapReader::MapReader(Node map, std::string what) : map_(std::move(map)), what_(std::move(what)) {
  if (map_.defined() && !map_.is_map())
    map_.fail(fmt::format("{} must be a mapping of keys to values", what_));
}

bool MapReader::has(const std::string& key) {
  known_.insert(key);
  return map_.has(key) && map_.child(key).defined();
}

Node MapReader::optional(const std::string& key) {
  known_.insert(key);
  return map_.child(key);
}

Node MapReader::required(const std::string& key) {
  Node n = optional(key);
  if (!n.defined()) {
    // A misspelt key is the likelier mistake than a forgotten one: say so, at the typo.
    const YAML::Node& y = map_.yaml();
    if (y.IsMap())
      for (auto it = y.begin(); it != y.end(); ++it) {
        std::string k = it->first.Scalar();
        if (!known_.count(k) && did_you_mean(k, {key}) == key)
          Node(map_.doc(), it->first, map_.path()).fail(fmt::format("unknown key '{}' in {} (did you mean '{}'?)", k, what_, key));
      }
    map_.fail(fmt::format("missing required key '{}' in {}", key, what_));
  }
  return n;
}

std::string MapReader::get_choice(const std::string& key, const std::vector<std::string>& choices,
                                  const std::string& fallback) {
  Node n = fallback.empty() ? required(key) : optional(key);
  if (!n.defined()) return fallback;
  std::string v = n.as<std::string>();
  if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    n.fail(fmt::format("'{}' is not a valid {} for {}{}; valid: {}", v, key, what_, suggestion(v, choices), list));
  }
  return v;
}

std::pair<int, int> MapReader::get_pair(const std::string& key, std::optional<std::pair<int, int>> fallback) {
  Node n = fallback ? optional(key) : required(key);
  if (!n.defined()) return *fallback;
  std::pair<int, int> v;
  if (n.is_seq()) {
    if (n.size() != 2) n.fail(fmt::format("'{}' must be one integer or a list of two", n.path()));
    v = {n.at(0).as<int>(), n.at(1).as<int>()};
  } else {
    v.first = v.second = n.as<int>();
  }
  if (v.first <= 0 || v.second <= 0) n.fail(fmt::format("'{}' must be positive", n.path()));
  return v;
}

int64_t MapReader::get_int(const std::string& key, std::optional<int64_t> fallback, int64_t min, int64_t max) {
  Node n = fallback ? optional(key) : required(key);
  if (!n.defined()) return *fallback;
  int64_t v = n.as<int64_t>();
  if (v < min || v > max) {
    if (max == INT64_MAX) n.fail(fmt::format("'{}' must be at least {}, not {}", n.path(), min, v));
    n.fail(fmt::format("'{}' must be between {} and {}, not {}", n.path(), min, max, v));
  }
  return v;
}

double MapReader::get_float(const std::string& key, std::optional<double> fallback, double min, double max) {
  Node n = fallback ? optional(key) : required(key);
  if (!n.defined()) return *fallback;
  double v = n.as<double>();
  if (v < min || v > max) n.fail(fmt::format("'{}' must be between {} and {}, not {}", n.path(), min, max, v));
  return v;
}

void MapReader::allow(std::initializer_list<const char*> keys) {
  for (const char* k : keys) known_.insert(k);
}

void MapReader::finish() const {
  if (!map_.is_map()) return;
  std::vector<std::string> known(known_.begin(), known_.end());
  const YAML::Node& y = map_.yaml();
  for (auto it = y.begin(); it != y.end(); ++it) {
    std::string k = it->first.Scalar();
    if (!known_.count(k)) {
      Node key_node(map_.doc(), it->first, map_.path());  // points at the key itself
      key_node.fail(fmt::format("unknown key '{}' in {}{}", k, what_, suggestion(k, known)));
    }
  }
}

// ---- documents -------------------------------------------------------------------------------

static void apply_override(Document& doc, const std::string& text) {
  size_t eq = text.find('=');
  std::string where = "--set " + text;
  if (eq == std::string::npos || eq == 0) throw ConfigError(where, "expected key=value, e.g. --set optimizer.lr=0.01");
  std::string path = text.substr(0, eq), value = text.substr(eq + 1);
  YAML::Node v;
  try {
    v = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw ConfigError(where, "cannot parse the value as YAML: " + e.msg);
  }
  if (!v.IsDefined()) v = YAML::Node(YAML::NodeType::Null);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw ConfigError(where, "empty component in key '" + path + "'");
    parts.push_back(p);
  }
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
    if (last) {
      cur[p] = v;
    } else {
      if (!cur[p].IsDefined() || cur[p].IsNull()) cur[p] = YAML::Node(YAML::NodeType::Map);
      YAML::Node next = cur[p];
      cur.reset(next);
    }
  }
  doc.overrides.push_back({text, v});
}

std::shared_ptr<Document> parse_document(const std::string& text, const std::string& name,
                                         const std::vector<std::string>& overrides) {
  auto doc = std::make_shared<Document>();
  doc->file = name;
  try {
    doc->root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(fmt::format("{}:{}:{}", name, e.mark.line + 1, e.mark.column + 1), e.msg);
  } catch (const YAML::Exception& e) {
    throw ConfigError(name, e.msg);
  }
  if (doc->root.IsDefined() && !doc->root.IsNull() && !doc->root.IsMap())
    throw ConfigError(name + ":1:1", "a config must be a mapping of sections (model:, data:, train:, ...)");
  for (const std::string& o : overrides) apply_override(*doc, o);
  return doc;
}

std::shared_ptr<Document> load_document(const std::string& file, const std::vector<std::string>& overrides) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file, "cannot open the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_document(ss.str(), file, overrides);
}

Node root(const std::shared_ptr<Document>& doc) { return Node(doc, doc->root, ""); }

std::string emit(const Document& doc) {
  YAML::Emitter out;
  out << doc.root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace trainer::cfg
