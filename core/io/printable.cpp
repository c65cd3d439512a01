// One-line, valid-UTF-8 forms of names and messages.
#include "core/io/printable.h"

#include <fmt/format.h>

#include "core/io/utf8.h"

namespace trainer {

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c), ++i;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t", ++i;
    } else if (const size_t n = c >= 0x80 ? utf8_length(s, i) : 0; n > 0) {
      out.append(s.substr(i, n)), i += n;
    } else {
      out += fmt::format("\\x{:02x}", c), ++i;
    }
  }
  return out;
}

}  // namespace trainer
