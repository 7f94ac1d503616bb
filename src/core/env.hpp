// Reading kiln's KILN_* environment variables (docs/environment.md lists every one): one parser per kind of
// value, so every variable accepts the same spellings and a bad value is a ValueError naming the variable, its
// value and what it accepts, thrown where the variable is first read.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>

namespace kiln::detail {

/// The variable's value; nullopt when it is unset or empty.
std::optional<std::string> env_string(const char* name);

/// A switch: 1/true/on/yes or 0/false/off/no (any case); `fallback` when unset or empty. Throws ValueError else.
bool env_flag(const char* name, bool fallback);

/// A decimal integer in [min, max]; `fallback` when unset or empty. Throws ValueError else.
int64_t env_int(const char* name, int64_t fallback, int64_t min = 0,
                int64_t max = std::numeric_limits<int64_t>::max());

/// A decimal number above zero (e.g. seconds); `fallback` when unset or empty. Throws ValueError else.
double env_positive(const char* name, double fallback);

/// One of `choices` (exact spelling); `fallback` when unset or empty. Throws ValueError listing the choices else.
std::string env_choice(const char* name, std::initializer_list<const char*> choices, const char* fallback);

}  // namespace kiln::detail
