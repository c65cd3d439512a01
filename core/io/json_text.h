// JSON text for the few hand-written JSON lines (metrics.jsonl, `trainer devices --json`, bench lines): a quoted, escaped string.
#pragma once
#include <fmt/format.h>

#include <string>

namespace trainer {

// `s` as a JSON string literal: quotes and backslashes escaped, control bytes as \u00XX.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", int(c));
    else out += c;
  }
  return out + "\"";
}

}  // namespace trainer
