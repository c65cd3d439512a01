// Config documents: YAML with source locations, --set overrides, typed reads and did-you-mean errors.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/printable.h"

// The YAML library stays inside core/io (config.cpp and its private headers): a Node is an opaque handle,
// so no other part of the program compiles against the YAML library.

namespace trainer::cfg {

// A config problem: `where` is "file:line:col" (or "--set key=value"), printed before the message.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(const std::string& where, const std::string& message)
      : std::runtime_error(where + ": " + message), where_(where), message_(message) {}
  const std::string& where() const { return where_; }
  const std::string& message() const { return message_; }

 private:
  std::string where_, message_;
};

struct DocumentTree;  // the YAML tree and the --set overrides applied to it (config.cpp)
struct NodeRef;       // one YAML node of a document (config.cpp)

struct Document {
  std::string file;
  std::shared_ptr<DocumentTree> tree;
};

class Node;
// Block parameters in scope: a scalar "$name" read through a Node with bindings stands for the
// bound node (which keeps its own location for messages).
using Bindings = std::map<std::string, Node>;

class Node {
 public:
  Node() = default;
  Node(std::shared_ptr<Document> doc, std::shared_ptr<const NodeRef> n, std::string path,
       std::shared_ptr<const Bindings> env = nullptr)
      : doc_(std::move(doc)), node_(std::move(n)), path_(std::move(path)), env_(std::move(env)) {}
  // Value semantics: a handle; copying or assigning never writes to the document.

  // The same node read with block parameters `env` in scope.
  Node with_bindings(std::shared_ptr<const Bindings> env) const { return Node(doc_, node_, path_, std::move(env)); }
  const std::shared_ptr<const Bindings>& bindings() const { return env_; }

  bool defined() const;
  bool is_map() const;
  bool is_seq() const;
  bool is_scalar() const;
  const std::shared_ptr<const NodeRef>& ref() const { return node_; }  // for core/io's own code
  const std::string& path() const { return path_; }  // "model.layers[3].filters"
  const std::shared_ptr<Document>& doc() const { return doc_; }
  std::string where() const;  // "configs/x.yaml:12:5"
  [[noreturn]] void fail(const std::string& message) const;

  // Scalars with the expected type named in the error ("expected an integer, got 'abc'").
  template <class T>
  T as() const;
  std::string scalar() const;  // the raw text of a scalar

  // Sequences.
  size_t size() const;
  Node at(size_t i) const;
  std::vector<Node> items() const;  // a sequence's elements (a scalar counts as one element)

  // Maps: the keys in file order.
  std::vector<std::string> keys() const;
  bool has(const std::string& key) const;
  Node child(const std::string& key) const;  // undefined Node when absent

 private:
  Node resolve(Node n) const;  // applies the bindings to a child
  std::shared_ptr<Document> doc_;
  std::shared_ptr<const NodeRef> node_;
  std::string path_;
  std::shared_ptr<const Bindings> env_;
};

template <> std::string Node::as<std::string>() const;
template <> int64_t Node::as<int64_t>() const;
template <> int Node::as<int>() const;
template <> double Node::as<double>() const;
template <> float Node::as<float>() const;
template <> bool Node::as<bool>() const;

// Reads one map (a config section or a layer) and remembers every key asked for, so `finish()`
// can reject the keys nobody asked for: "unknown key 'filtrs' in conv2d layer (did you mean
// 'filters'?)". Asking for a key, present or not, makes it known.
class MapReader {
 public:
  MapReader(Node map, std::string what);
  const Node& node() const { return map_; }
  const std::string& what() const { return what_; }

  bool has(const std::string& key);
  Node required(const std::string& key);  // "missing required key 'filters' in conv2d layer"
  Node optional(const std::string& key);  // undefined when absent

  template <class T>
  T get(const std::string& key) {
    return required(key).as<T>();
  }
  template <class T>
  T get(const std::string& key, T fallback) {
    Node n = optional(key);
    return n.defined() ? n.as<T>() : fallback;
  }
  // One of `choices` (did-you-mean on a miss); `fallback` when absent (required when empty).
  std::string get_choice(const std::string& key, const std::vector<std::string>& choices,
                         const std::string& fallback = "");
  // An int or an [a, b] pair: kernel: 3 -> (3, 3); each at least `min`.
  std::pair<int, int> get_pair(const std::string& key, std::optional<std::pair<int, int>> fallback, int min = 1);
  // Ints and floats with a range check: "must be > 0" etc.
  int64_t get_int(const std::string& key, std::optional<int64_t> fallback, int64_t min, int64_t max);
  double get_float(const std::string& key, std::optional<double> fallback, double min, double max);

  // Marks keys as known without reading them (handled elsewhere).
  void allow(std::initializer_list<const char*> keys);
  void finish() const;

 private:
  Node map_;
  std::string what_;
  std::set<std::string> known_;
};

// The closest candidate within a small edit distance, or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
// " (did you mean 'x'?)" or "".
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates);

// Loads a YAML file and applies "a.b=value" overrides (value parsed as YAML; list items by index,
// "model.layers.3.filters=64"). Syntax errors become ConfigError with the file's line and column.
std::shared_ptr<Document> load_document(const std::string& file, const std::vector<std::string>& overrides = {});
// The same from a string (tests, embedded configs); `name` stands for the file in messages.
std::shared_ptr<Document> parse_document(const std::string& text, const std::string& name,
                                         const std::vector<std::string>& overrides = {});
Node root(const std::shared_ptr<Document>& doc);
// The resolved config as YAML text, without the top-level sections named in `without`.
std::string emit(const Document& doc, const std::vector<std::string>& without = {});
// Raw input bytes quoted in a message (the YAML parser's, --set's): trainer::printable
// (core/io/printable.h), one line.
using ::trainer::printable;

}  // namespace trainer::cfg
