// Helpers shared by the kiln::fuse tests on the CPU (test_fuse.cpp) and on the GPU (tests/cuda/test_fuse_gpu.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln_test {

/// The walkthrough's elementwise chain: tanh(x * 1.5 + 0.3) * x - exp(-x * x) * 0.5.
inline constexpr auto chain_fn = [](auto x) { return tanh(x * 1.5f + 0.3f) * x - exp(-x * x) * 0.5f; };

/// Expects a fused result to equal the unfused ops' result: same dtype, shape and device, NaN where it has
/// NaN, and every other element equal (or within `tolerance` relative to 1 + |eager|, when one is given).
inline void expect_equal(const kiln::Array& fused, const kiln::Array& eager, double tolerance = 0.0) {
  ASSERT_EQ(fused.dtype(), eager.dtype());
  ASSERT_EQ(fused.shape(), eager.shape());
  ASSERT_EQ(fused.device(), eager.device());
  std::vector<double> f = fused.to_vector<double>(), e = eager.to_vector<double>();
  for (size_t i = 0; i < f.size(); ++i) {
    if (std::isnan(e[i])) {
      EXPECT_TRUE(std::isnan(f[i])) << "element " << i;
      continue;
    }
    if (tolerance == 0.0)
      ASSERT_EQ(f[i], e[i]) << "element " << i;
    else
      ASSERT_NEAR(f[i], e[i], tolerance * (1 + std::abs(e[i]))) << "element " << i;
  }
}

}  // namespace kiln_test
