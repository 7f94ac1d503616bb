// The KILN_* environment parsers (env.hpp).
#include "core/env.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kiln/error.hpp"

namespace kiln::detail {

namespace {

[[noreturn]] void bad_value(const char* name, const std::string& value, const std::string& accepted) {
  throw ValueError("the environment variable " + std::string(name) + " is '" + value + "': set it to " + accepted +
                   ", or unset it for the default (docs/environment.md)");
}

}  // namespace

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

bool env_flag(const char* name, bool fallback) {
  const std::optional<std::string> v = env_string(name);
  if (!v) return fallback;
  std::string s = *v;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  bad_value(name, *v, "1/true/on/yes or 0/false/off/no");
}

int64_t env_int(const char* name, int64_t fallback, int64_t min, int64_t max) {
  const std::optional<std::string> v = env_string(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE || x < min || x > max)
    bad_value(name, *v, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return static_cast<int64_t>(x);
}

double env_positive(const char* name, double fallback) {
  const std::optional<std::string> v = env_string(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (*end != '\0' || !std::isfinite(x) || x <= 0) bad_value(name, *v, "a number above zero");
  return x;
}

std::string env_choice(const char* name, std::initializer_list<const char*> choices, const char* fallback) {
  const std::optional<std::string> v = env_string(name);
  if (!v) return fallback;
  std::string accepted;
  for (const char* c : choices) {
    if (*v == c) return *v;
    accepted += accepted.empty() ? c : std::string(" or ") + c;
  }
  bad_value(name, *v, accepted);
}

}  // namespace kiln::detail
