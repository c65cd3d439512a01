// Config documents: loading, --set overrides, typed scalar reads, locations and did-you-mean.
#include "core/io/config.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include "core/io/config_bounds.h"
#include "core/io/config_text.h"
#include "core/io/file.h"
#include "core/io/yaml_tree.h"

namespace trainer::cfg {

namespace {
// A handle on YAML node `n` of `doc`.
Node make(std::shared_ptr<Document> doc, YAML::Node n, std::string path, std::shared_ptr<const Bindings> env = nullptr) {
  return Node(std::move(doc), std::make_shared<const NodeRef>(std::move(n)), std::move(path), std::move(env));
}
}  // namespace

bool Node::defined() const { return node_ && node_->node.IsDefined() && !node_->node.IsNull(); }
bool Node::is_map() const { return node_ && node_->node.IsMap(); }
bool Node::is_seq() const { return node_ && node_->node.IsSequence(); }
bool Node::is_scalar() const { return node_ && node_->node.IsScalar(); }

// ---- locations -------------------------------------------------------------------------------


std::string Node::where() const {
  if (!doc_) return "<config>";
  const YAML::Node& y_ = yaml_of(*this);
  for (const Override& o : doc_->tree->overrides) {
    if (y_.IsDefined() && o.node.IsDefined() && y_.is(o.node)) return "--set " + o.text;
    for (const YAML::Node& n : o.nodes)
      if (y_.IsDefined() && y_.is(n)) return "--set " + o.text;
  }
  YAML::Mark m = y_.IsDefined() ? y_.Mark() : YAML::Mark::null_mark();
  if (m.is_null() || m.line < 0) return doc_->file;
  return fmt::format("{}:{}:{}", doc_->file, m.line + 1, m.column + 1);
}

void Node::fail(const std::string& message) const { throw ConfigError(where(), message); }

// ---- scalars ---------------------------------------------------------------------------------

std::string Node::scalar() const {
  const YAML::Node& y_ = yaml_of(*this);
  if (!y_.IsScalar()) fail(fmt::format("'{}' must be a single value", path_));
  return y_.Scalar();
}

namespace {

std::string shown(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
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
  const YAML::Node& y_ = yaml_of(*this);
  if (!y_.IsScalar()) fail(fmt::format("'{}' must be a string, not {}", path_, shown(y_)));
  return y_.Scalar();
}

template <>
int64_t Node::as<int64_t>() const {
  const YAML::Node& y_ = yaml_of(*this);
  int64_t v = 0;
  bool overflow = false;
  if (!y_.IsScalar() || !parse_int(y_.Scalar(), v, &overflow))
    fail(overflow ? fmt::format("'{}' is out of range: {}", path_, y_.Scalar())
                  : fmt::format("'{}' must be an integer, not {}", path_, shown(y_)));
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
  const YAML::Node& y_ = yaml_of(*this);
  double v = 0;
  if (!y_.IsScalar() || !parse_double(y_.Scalar(), v))
    fail(fmt::format("'{}' must be a number, not {}", path_, shown(y_)));
  return v;
}

template <>
float Node::as<float>() const {
  return float(as<double>());
}

template <>
bool Node::as<bool>() const {
  const YAML::Node& y_ = yaml_of(*this);
  if (y_.IsScalar()) {
    const std::string& s = y_.Scalar();
    if (s == "true" || s == "True" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "False" || s == "no" || s == "off") return false;
  }
  fail(fmt::format("'{}' must be true or false, not {}", path_, shown(y_)));
}

// ---- sequences and maps ----------------------------------------------------------------------

size_t Node::size() const {
  const YAML::Node& y = yaml_of(*this);
  return y.IsSequence() || y.IsMap() ? y.size() : (defined() ? 1 : 0);
}

Node Node::resolve(Node n) const {
  if (!env_ || !n.is_scalar()) return n;
  const std::string& s = yaml_of(n).Scalar();
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
  const YAML::Node& y_ = yaml_of(*this);
  if (!y_.IsSequence()) fail(fmt::format("'{}' must be a list, not {}", path_, shown(y_)));
  const YAML::Node& cn = y_;
  return resolve(make(doc_, cn[i], fmt::format("{}[{}]", path_, i), env_));
}

std::vector<Node> Node::items() const {
  const YAML::Node& y_ = yaml_of(*this);
  std::vector<Node> out;
  if (y_.IsSequence()) {
    for (size_t i = 0; i < y_.size(); ++i) out.push_back(at(i));
  } else if (defined()) {
    out.push_back(*this);
  }
  return out;
}

std::vector<std::string> Node::keys() const {
  const YAML::Node& y_ = yaml_of(*this);
  std::vector<std::string> out;
  if (!y_.IsMap()) return out;
  for (auto it = y_.begin(); it != y_.end(); ++it) out.push_back(it->first.Scalar());
  return out;
}

bool Node::has(const std::string& key) const {
  const YAML::Node& y_ = yaml_of(*this);
  if (!y_.IsMap()) return false;
  const YAML::Node& cn = y_;
  return cn[key].IsDefined();
}

Node Node::child(const std::string& key) const {
  const YAML::Node& y_ = yaml_of(*this);
  std::string p = path_.empty() ? key : path_ + "." + key;
  if (!y_.IsMap()) return make(doc_, YAML::Node(YAML::NodeType::Undefined), p);
  const YAML::Node& cn = y_;
  YAML::Node c = cn[key];  // const access never inserts; an absent key gives an invalid node
  if (!c.IsDefined()) return make(doc_, YAML::Node(YAML::NodeType::Undefined), p, env_);
  return resolve(make(doc_, c, p, env_));
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
  // Ties go to the longer common prefix: 'gpu' is 'gpus' rather than 'cpu'.
  auto prefix = [&](const std::string& c) {
    size_t n = 0;
    while (n < word.size() && n < c.size() &&
           std::tolower(static_cast<unsigned char>(word[n])) == std::tolower(static_cast<unsigned char>(c[n])))
      ++n;
    return n;
  };
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d || (d == best_d && prefix(c) > prefix(best))) best_d = d, best = c;
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
    const YAML::Node& y = yaml_of(map_);
    if (y.IsMap())
      for (auto it = y.begin(); it != y.end(); ++it) {
        std::string k = it->first.Scalar();
        if (!known_.count(k) && did_you_mean(k, {key}) == key)
          make(map_.doc(), it->first, map_.path()).fail(fmt::format("unknown key '{}' in {} (did you mean '{}'?)", k, what_, key));
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

std::pair<int, int> MapReader::get_pair(const std::string& key, std::optional<std::pair<int, int>> fallback, int min) {
  Node n = fallback ? optional(key) : required(key);
  if (!n.defined()) return *fallback;
  std::pair<int, int> v;
  if (n.is_seq()) {
    if (n.size() != 2) n.fail(fmt::format("'{}' must be one integer or a list of two", n.path()));
    v = {n.at(0).as<int>(), n.at(1).as<int>()};
  } else {
    v.first = v.second = n.as<int>();
  }
  if (v.first < min || v.second < min)
    n.fail(min == 1 ? fmt::format("'{}' must be positive", n.path()) : fmt::format("'{}' must be at least {}", n.path(), min));
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
  const YAML::Node& y = yaml_of(map_);
  for (auto it = y.begin(); it != y.end(); ++it) {
    std::string k = it->first.Scalar();
    if (!known_.count(k)) {
      Node key_node = make(map_.doc(), it->first, map_.path());  // points at the key itself
      key_node.fail(fmt::format("unknown key '{}' in {}{}", k, what_, suggestion(k, known)));
    }
  }
}

// ---- documents -------------------------------------------------------------------------------

std::shared_ptr<Document> parse_document(const std::string& raw, const std::string& name,
                                         const std::vector<std::string>& overrides) {
  auto doc = std::make_shared<Document>();
  doc->file = name;
  doc->tree = std::make_shared<DocumentTree>();
  DocumentTree& tree = *doc->tree;
  if (raw.size() > kMaxConfigBytes)
    throw ConfigError(name + ":1:1", fmt::format("the config is {} bytes; a config may be at most {} MiB", raw.size(),
                                                 kMaxConfigBytes >> 20));
  // A UTF-8 byte-order mark (YAML allows one; Windows editors write it) is not part of the text:
  // without it, columns on the first line count as the user sees them.
  const bool bom = raw.size() >= 3 && raw.compare(0, 3, "\xef\xbb\xbf") == 0;
  const std::string text = bom ? raw.substr(3) : raw;
  check_text(text, name);
  try {
    tree.root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's own bound, far past kMaxConfigDepth
    throw ConfigError(at_mark(name, e.mark), fmt::format("lists and maps nest more than {} deep here; a config is not that deep",
                                                         kMaxConfigDepth));
  } catch (const YAML::ParserException& e) {
    explain_tabs(text, name, e.mark.line + 1);
    // yaml-cpp's words, with what usually causes them.
    static const std::map<std::string, std::string> hints = {
        {"end of map not found", " (is this line indented like the keys above it?)"},
        {"end of sequence not found", " (is this line indented like the items above it?)"},
        {"end of sequence flow not found", " (a ']' missing?)"},
        {"end of map flow not found", " (a '}' missing?)"},
        {"illegal map value", " (a ': ' inside a value? quote the value)"},
    };
    auto h = hints.find(e.msg);
    throw ConfigError(at_mark(name, e.mark), printable(e.msg) + (h == hints.end() ? "" : h->second));
  } catch (const YAML::Exception& e) {
    throw ConfigError(name, printable(e.msg));
  }
  check_expansion(tree.root, name);
  check_node(tree.root, text, name);
  if (tree.root.IsDefined() && !tree.root.IsNull() && !tree.root.IsMap())
    throw ConfigError(name + ":1:1", "a config must be a mapping of sections (model:, data:, train:, ...)");
  for (const std::string& o : overrides) apply_override(tree, o);
  return doc;
}

std::shared_ptr<Document> load_document(const std::string& file, const std::vector<std::string>& overrides) {
  // A file: opened without blocking, refused unless a regular file (/dev/zero), and by its size
  // before a byte is read (a huge file is not read at all). Standard input ("-") or a pipe
  // (`trainer run <(envsubst < t.yaml)`, a FIFO): read once, to the same limit (core/io/file.h
  // read_stream: a FIFO nobody writes to is refused, not waited for); the run directory's
  // config.yaml keeps it for --resume.
  std::string text;
  const std::string name = file == "-" ? "<stdin>" : file;
  try {
    if (is_stream(file)) {
      text = read_stream(file, kMaxConfigBytes, "the most a config may be");
    } else {
      InputFile in(file);
      if (in.size() > kMaxConfigBytes)
        throw ConfigError(file + ":1:1", fmt::format("the config is larger than {} MiB; a config may be at most that (is "
                                                     "this the right file?)", kMaxConfigBytes >> 20));
      text = in.read_all(kMaxConfigBytes, "the most a config may be");
    }
  } catch (const InputFileError& e) {
    if (e.err != 0) throw ConfigError(name, fmt::format("cannot open the config file: {}", std::strerror(e.err)));
    if (!e.kind.empty() && e.kind != "a FIFO")
      throw ConfigError(name, fmt::format("cannot read the config file: it is {}, not a regular file", e.kind));
    throw ConfigError(name, fmt::format("cannot read the config: {}", e.reason));
  }
  auto doc = parse_document(text, name, overrides);
  // Nothing but comments and blank lines (a run would only fail later, on a missing model:).
  if (overrides.empty() && (!doc->tree->root.IsDefined() || doc->tree->root.IsNull()))
    throw ConfigError(name + ":1:1", "the config is empty (expected sections such as model:, data:, train:)");
  return doc;
}

Node root(const std::shared_ptr<Document>& doc) { return make(doc, doc->tree->root, ""); }

std::string emit(const Document& doc, const std::vector<std::string>& without) {
  // A copy of the document's tree where keys are left out: yaml-cpp's Node::operator= on a node
  // that refers to the tree would re-point the tree's own root at the copy (and the removals would
  // then change the document), so the copy is made by construction, never by assignment.
  const bool cut = !without.empty() && doc.tree->root.IsMap();
  YAML::Node root = cut ? YAML::Clone(doc.tree->root) : doc.tree->root;
  if (cut)
    for (const std::string& key : without) root.remove(key);
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace trainer::cfg
