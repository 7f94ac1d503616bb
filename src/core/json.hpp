// Small JSON writing helpers shared by kiln::bench (src/core/bench.cpp), the
// `kiln` tool's benchmark output and the benchmark programs (internal; header
// only, no dependencies beyond the standard library).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace kiln::detail {

/// `v` as a JSON string literal: quotes and backslashes escaped, control characters as \u00XX.
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
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace kiln::detail
