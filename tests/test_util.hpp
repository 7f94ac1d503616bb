// Helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

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

/// Machine epsilon of a floating dtype (float64's for the others).
inline double epsilon(kiln::DType t) {
  switch (t) {
    case kiln::DType::Float16: return std::ldexp(1.0, -10);
    case kiln::DType::BFloat16: return std::ldexp(1.0, -7);
    case kiln::DType::Float32: return std::ldexp(1.0, -23);
    default: return std::ldexp(1.0, -52);
  }
}

/// The view tests/golden/reduce_golden.py's matmul_view takes of a golden matmul operand.
inline kiln::Array golden_matmul_view(const kiln::Array& x, const std::string& view) {
  if (view == "t") return kiln::swapaxes(x, -1, -2);
  if (view == "s2") return x.slice(x.ndim() - 1, {}, {}, 2);
  if (view == "neg") return x.slice(0, {}, {}, -1);
  return x;
}

/// Relative tolerance of the golden matmul cases per result dtype (float accumulation order differs).
inline double golden_matmul_tolerance(kiln::DType t) {
  switch (t) {
    case kiln::DType::Float16: return 4e-3;
    case kiln::DType::BFloat16: return 3e-2;
    case kiln::DType::Float32: return 2e-5;
    default: return 1e-12;
  }
}

}  // namespace kiln_test
