// Machine-readable output (`--json` lines, metrics.jsonl): one JSON object per line, always made by nlohmann::json.
#pragma once
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

namespace trainer {

using JsonLine = nlohmann::ordered_json;  // fields in the order they were set

// `j` on one line: strings escaped by the library (a quote, a newline in a path), NaN and
// infinities as null, bytes that are not UTF-8 replaced by U+FFFD rather than failing.
inline std::string json_line(const JsonLine& j) { return j.dump(-1, ' ', false, JsonLine::error_handler_t::replace); }

// `v` rounded to `digits` decimals, for figures whose further digits are noise (ms, img/s).
inline double json_rounded(double v, int digits) {
  if (!std::isfinite(v)) return v;
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

}  // namespace trainer
