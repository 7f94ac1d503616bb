// Fused optimizer steps and losses built with kiln::fuse, and their float64 references computed by hand
// (plain loops): shared by the CPU tests (test_fuse_outputs.cpp) and the GPU ones (tests/cuda/test_fuse_gpu.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln_test {

/// One Adam step: returns (p', m', v'); c1, c2 are the bias corrections 1 - beta^t.
inline constexpr auto adam_fn = [](auto p, auto g, auto m, auto v, auto lr, auto b1, auto b2, auto eps, auto c1,
                                   auto c2) {
  auto m2 = m * b1 + g * (1 - b1);
  auto v2 = v * b2 + g * g * (1 - b2);
  auto p2 = p - lr * (m2 / c1) / (sqrt(v2 / c2) + eps);
  return std::tuple{p2, m2, v2};
};

/// One SGD step with momentum and weight decay: returns (p', buf').
inline constexpr auto sgd_fn = [](auto p, auto g, auto buf, auto lr, auto mu, auto wd) {
  auto b2 = buf * mu + (g + p * wd);
  return std::tuple{p - lr * b2, b2};
};

/// softmax and log_softmax over the last axis, as fused functions trace them.
inline constexpr auto softmax_fn = [](auto x) {
  auto e = exp(x - max(x, -1, true));
  return e / sum(e, -1, true);
};
inline constexpr auto log_softmax_fn = [](auto x) {
  auto s = x - max(x, -1, true);
  return s - log(sum(exp(s), -1, true));
};

struct AdamState {
  std::vector<double> p, m, v;
};

/// `steps` Adam steps in float64 on (p, m, v) with gradients grads[t].
inline AdamState adam_reference(AdamState s, const std::vector<std::vector<double>>& grads, double lr, double b1,
                                double b2, double eps) {
  for (size_t t = 0; t < grads.size(); ++t) {
    const double c1 = 1 - std::pow(b1, static_cast<double>(t + 1)), c2 = 1 - std::pow(b2, static_cast<double>(t + 1));
    for (size_t i = 0; i < s.p.size(); ++i) {
      const double g = grads[t][i];
      s.m[i] = b1 * s.m[i] + (1 - b1) * g;
      s.v[i] = b2 * s.v[i] + (1 - b2) * g * g;
      s.p[i] -= lr * (s.m[i] / c1) / (std::sqrt(s.v[i] / c2) + eps);
    }
  }
  return s;
}

/// Softmax (or log_softmax) of each row of a rows x cols matrix, in float64.
inline std::vector<double> softmax_reference(const std::vector<double>& x, int64_t rows, int64_t cols, bool log) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    const double m = *std::max_element(row, row + cols);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(row[c] - m);
    for (int64_t c = 0; c < cols; ++c)
      y[static_cast<size_t>(r * cols + c)] = log ? row[c] - m - std::log(s) : std::exp(row[c] - m) / s;
  }
  return y;
}

/// Deterministic values in [-scale, scale) (a small LCG: no dependence on kiln's random numbers).
inline std::vector<double> test_values(size_t n, uint32_t seed, double scale = 1.0) {
  std::vector<double> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (double& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (static_cast<double>(s >> 8) / static_cast<double>(1u << 24) * 2 - 1);
  }
  return v;
}

/// The values as a float32 array on `device`, and rounded to float32 (the inputs the references start from).
inline kiln::Array f32_array(std::vector<double>& v, const kiln::Shape& shape, kiln::Device device = kiln::cpu()) {
  std::vector<float> f(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i) v[i] = f[i];
  return kiln::from_data(f).reshape(shape).to(device);
}

/// Expects `a` (any dtype) to equal `want` within `tol` relative to 1 + |want|.
inline void expect_near(const kiln::Array& a, const std::vector<double>& want, double tol) {
  std::vector<double> got = a.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
}

}  // namespace kiln_test
