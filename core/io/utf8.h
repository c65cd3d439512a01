// UTF-8 validity: names that end up in JSON (checkpoint headers, sidecars, --json lines) must be text.
#pragma once
#include <cstddef>
#include <string_view>

namespace trainer {

// Whether `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF);
// when not, *bad_at is the byte offset of the first bad sequence.
inline bool valid_utf8(std::string_view s, size_t* bad_at = nullptr) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = (unsigned char)s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    unsigned cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; ok && k < n; ++k) {
      unsigned char d = (unsigned char)s[i + k];
      ok = (d >> 6) == 0x2;
      cp = (cp << 6) | (d & 0x3f);
    }
    ok = ok && !(n == 2 && cp < 0x80) && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
         !(cp >= 0xd800 && cp <= 0xdfff);
    if (!ok) {
      if (bad_at) *bad_at = i;
      return false;
    }
    i += n;
  }
  return true;
}

}  // namespace trainer
