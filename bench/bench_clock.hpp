// The host clock and the seconds format shared by the bench/ programs (bench_common.hpp) and
// `kiln bench` (tools/kiln): header only, fmt and the standard library.
#pragma once

#include <fmt/core.h>

#include <chrono>
#include <string>

namespace kiln::benchutil {

/// Seconds on the host's steady clock (monotonic; for differences only).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// "12.3 us" style: three significant digits in s, ms, us or ns; "-" when `s` is not positive.
inline std::string format_seconds(double s) {
  if (!(s > 0)) return "-";
  if (s >= 1) return fmt::format("{:.3g} s", s);
  if (s >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  if (s >= 1e-6) return fmt::format("{:.3g} us", s * 1e6);
  return fmt::format("{:.3g} ns", s * 1e9);
}

}  // namespace kiln::benchutil
