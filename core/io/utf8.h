// UTF-8 validity: names that end up in JSON (checkpoint headers, sidecars, --json lines) must be text.
#pragma once
#include <cstddef>
#include <string_view>

namespace trainer {

// The length of the well-formed UTF-8 sequence starting at s[i] (1 to 4), or 0 (an invalid byte
// there: a stray continuation, an overlong form, a surrogate, past U+10FFFF, or cut short).
inline size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range (narrower after E0, ED, F0, F4)
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  if (n == 0 || i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(k) < 0x80 || b(k) > 0xbf) return 0;
  return n;
}

// Whether `s` is well-formed UTF-8; when not, *bad_at is the byte offset of the first bad sequence.
inline bool valid_utf8(std::string_view s, size_t* bad_at = nullptr) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      if (bad_at) *bad_at = i;
      return false;
    }
    i += n;
  }
  return true;
}

}  // namespace trainer
