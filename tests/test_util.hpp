// Helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

namespace kiln_test {

/// Expects `f` to throw E (not another type) with a message containing every fragment.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' missing from: " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace kiln_test
