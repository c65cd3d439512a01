// Whole-text checks of a config: control bytes, tabs in the indentation, repeated keys,
// quoted values that run past their line; and the location and printable forms of messages.
#include "core/io/config_text.h"

#include <fmt/format.h>

#include <map>

#include "core/io/config.h"

namespace trainer::cfg {

std::string at_mark(const std::string& name, const YAML::Mark& m) {
  return fmt::format("{}:{}:{}", name, m.line + 1, m.column + 1);
}

// A config in UTF-16 or UTF-32 (YAML allows them; Windows editors save "Unicode" as UTF-16): by its
// byte-order mark, or, without one, by the zero bytes every ASCII character then has beside it.
// trainer reads UTF-8 only: said in one line, with the command that converts it.
void check_encoding(const std::string& text, const std::string& name) {
  auto starts = [&](const char* p, size_t n) { return text.size() >= n && text.compare(0, n, p, n) == 0; };
  std::string enc, from;  // what it is; iconv's name for it (with a mark, iconv reads the order from it)
  if (starts("\xff\xfe\x00\x00", 4)) enc = "UTF-32LE", from = "UTF-32";
  else if (starts("\x00\x00\xfe\xff", 4)) enc = "UTF-32BE", from = "UTF-32";
  else if (starts("\xff\xfe", 2)) enc = "UTF-16LE", from = "UTF-16";
  else if (starts("\xfe\xff", 2)) enc = "UTF-16BE", from = "UTF-16";
  else if (text.size() >= 2 && text[0] != '\0' && text[1] == '\0') enc = from = "UTF-16LE";
  else if (text.size() >= 2 && text[0] == '\0' && text[1] != '\0') enc = from = "UTF-16BE";
  if (enc.empty()) return;
  throw ConfigError(name + ":1:1", fmt::format("this config is {} text; configs are UTF-8: convert it with "
                                               "iconv -f {} -t UTF-8 '{}' > config.yaml", enc, from, name));
}

// Checks of the text that YAML itself would accept or report obscurely.
void check_text(const std::string& text, const std::string& name) {
  check_encoding(text, name);
  int line = 1, col = 1;
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n' && c != '\r' && c != '\t') || c == 0x7f)
      throw ConfigError(fmt::format("{}:{}:{}", name, line, col),
                        fmt::format("control byte 0x{:02x}: this is not a YAML text file", c));
    if (c == '\n') ++line, col = 1;
    else ++col;
  }
}

// After a syntax error: a tab in the indentation at or before the error's line is the likely
// cause (YAML indents with spaces only; yaml-cpp then reports something unrelated).
void explain_tabs(const std::string& text, const std::string& name, int error_line) {
  int line = 1;
  for (size_t pos = 0; pos < text.size() && line <= error_line; ++line) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    for (size_t i = pos; i < end && (text[i] == ' ' || text[i] == '\t'); ++i)
      if (text[i] == '\t')
        throw ConfigError(fmt::format("{}:{}:{}", name, line, i - pos + 1),
                          "a tab in the indentation: YAML indents with spaces only");
    pos = end + 1;
  }
}

// Whole-document checks after parsing:
// - a repeated key (yaml-cpp keeps both entries and lookups see only the first, so a second
//   `train:` would be silently ignored) is an error at the repeat;
// - a quoted value must close on its own line: YAML lets quoted strings run over lines, so a
//   missing closing quote swallows the rest of the file and surfaces as a baffling "missing key".
void check_node(const YAML::Node& n, const std::string& text, const std::string& name) {
  if (n.IsScalar()) {
    const YAML::Mark m = n.Mark();
    if (n.Tag() == "!" && m.pos >= 0 && size_t(m.pos) < text.size() && (text[size_t(m.pos)] == '"' || text[size_t(m.pos)] == '\'')) {
      char q = text[size_t(m.pos)];
      for (size_t i = size_t(m.pos) + 1; i < text.size(); ++i) {
        if (q == '"' && text[i] == '\\') {
          ++i;
        } else if (text[i] == q) {
          if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') ++i;  // '' inside '...'
          else break;
        } else if (text[i] == '\n') {
          throw ConfigError(at_mark(name, m), fmt::format("this quoted value does not end on its line (a closing {} missing?)", q));
        }
      }
    }
  } else if (n.IsSequence()) {
    for (const YAML::Node& c : n) check_node(c, text, name);
  } else if (n.IsMap()) {
    std::map<std::string, YAML::Mark> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      check_node(it->first, text, name);
      if (it->first.IsScalar()) {
        auto [at, fresh] = seen.emplace(it->first.Scalar(), it->first.Mark());
        if (!fresh)
          throw ConfigError(at_mark(name, it->first.Mark()),
                            fmt::format("duplicate key '{}' (first at line {})", it->first.Scalar(), at->second.line + 1));
      }
      check_node(it->second, text, name);
    }
  }
}

}  // namespace trainer::cfg
