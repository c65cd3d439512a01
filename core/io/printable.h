// printable(): any bytes as one line of valid UTF-8, for names and messages on the console and in logs.
#pragma once
#include <string>
#include <string_view>

namespace trainer {

// `s` with every byte that would break a one-line message escaped: \n, \r and \t as such, other
// control bytes (below 0x20, and 0x7f) and bytes that are not valid UTF-8 as \xNN. Valid UTF-8
// (non-ASCII names included) and everything else pass through unchanged, backslashes too.
std::string printable(std::string_view s);

}  // namespace trainer
