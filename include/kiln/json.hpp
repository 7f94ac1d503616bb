// Two small JSON writing helpers, the ones kiln::BenchResult::json() uses: programs that write
// benchmark records (the `kiln` tool, bench/) format strings and numbers the same way. Header only,
// the standard library alone.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace kiln {

/// `v` as a JSON string literal: quotes and backslashes escaped, control characters as \u00XX. Throws nothing.
inline std::string json_quote(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

/// `v` as a JSON number with 9 significant digits; null when it is not finite (JSON has no NaN/Inf).
/// Throws nothing.
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace kiln
