// Shared by tests/text: whether this build has ICU's Unicode categories (without ICU the pre-tokenizer takes
// ASCII only, and the tests of other scripts skip).
#pragma once

#include <gtest/gtest.h>

#include "kiln/error.hpp"
#include "kiln/text.hpp"

namespace kiln_test {

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
