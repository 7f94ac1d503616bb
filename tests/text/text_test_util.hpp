// Shared by tests/text: whether this build has ICU's Unicode categories (without ICU the pre-tokenizer takes
// ASCII only, and the tests of other scripts skip).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "kiln/error.hpp"
#include "kiln/text.hpp"

namespace kiln_test {

/// The checked-in golden files of tests/text/data.
inline const std::string kData = KILN_TEXT_DATA_DIR;

/// The bytes of the file at `path` ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline bool has_unicode_categories() {
  try {
    (void)kiln::text::pretokenize("\xC3\xA9");
    return true;
  } catch (const kiln::ValueError&) {
    return false;
  }
}

}  // namespace kiln_test

#define KILN_SKIP_WITHOUT_ICU()             \
  if (!kiln_test::has_unicode_categories()) \
  GTEST_SKIP() << "built without ICU (libicu-dev): the tokenizer takes ASCII text only"
