// The KILN_* environment parsers (src/core/env.hpp): accepted spellings, defaults, and the ValueError that names
// the variable and its value.
#include "core/env.hpp"

#include <gtest/gtest.h>

#include <string>

#include "kiln/error.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::ScopedEnv;
constexpr const char* kName = "KILN_TEST_ENV_VALUE";

template <class F>
std::string value_error_of(F&& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no ValueError";
}

TEST(Env, unset_and_empty_variables_give_the_default) {
  ScopedEnv unset(kName, nullptr);
  EXPECT_FALSE(detail::env_string(kName).has_value());
  EXPECT_TRUE(detail::env_flag(kName, true));
  EXPECT_EQ(detail::env_int(kName, 7), 7);
  EXPECT_EQ(detail::env_positive(kName, 2.5), 2.5);
  EXPECT_EQ(detail::env_choice(kName, {"a", "b"}, "b"), "b");
  ScopedEnv empty(kName, "");
  EXPECT_FALSE(detail::env_string(kName).has_value());
  EXPECT_FALSE(detail::env_flag(kName, false));
}

TEST(Env, flags_accept_the_usual_spellings_in_any_case) {
  for (const char* on : {"1", "true", "ON", "Yes"}) {
    ScopedEnv e(kName, on);
    EXPECT_TRUE(detail::env_flag(kName, false)) << on;
  }
  for (const char* off : {"0", "false", "Off", "NO"}) {
    ScopedEnv e(kName, off);
    EXPECT_FALSE(detail::env_flag(kName, true)) << off;
  }
}

TEST(Env, numbers_and_choices_parse) {
  {
    ScopedEnv e(kName, "134217728");
    EXPECT_EQ(detail::env_int(kName, 0), int64_t{1} << 27);
  }
  {
    ScopedEnv e(kName, "0.25");
    EXPECT_EQ(detail::env_positive(kName, 1.0), 0.25);
  }
  {
    ScopedEnv e(kName, "kiln");
    EXPECT_EQ(detail::env_choice(kName, {"openmp", "kiln"}, ""), "kiln");
  }
}

TEST(Env, a_bad_value_is_a_value_error_naming_the_variable_the_value_and_what_it_takes) {
  {
    ScopedEnv e(kName, "maybe");
    const std::string what = value_error_of([] { detail::env_flag(kName, false); });
    EXPECT_NE(what.find("KILN_TEST_ENV_VALUE is 'maybe'"), std::string::npos) << what;
    EXPECT_NE(what.find("1/true/on/yes or 0/false/off/no"), std::string::npos) << what;
  }
  {
    ScopedEnv e(kName, "12x");
    EXPECT_NE(value_error_of([] { detail::env_int(kName, 0); }).find("is '12x'"), std::string::npos);
  }
  {
    ScopedEnv e(kName, "-1");
    EXPECT_NE(value_error_of([] { detail::env_int(kName, 0, 0, 10); }).find("an integer in [0, 10]"),
              std::string::npos);
  }
  {
    ScopedEnv e(kName, "0");
    EXPECT_NE(value_error_of([] { detail::env_positive(kName, 1.0); }).find("a number above zero"),
              std::string::npos);
  }
  {
    ScopedEnv e(kName, "omp");
    EXPECT_NE(value_error_of([] { detail::env_choice(kName, {"openmp", "kiln"}, ""); }).find("openmp or kiln"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
