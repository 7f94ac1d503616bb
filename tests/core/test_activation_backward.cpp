// The activations' backward (GELU in both forms, SiLU, tanh, sigmoid) evaluated as one fused function: the same
// bits as the composed formula (fuse rounds where the unfused ops round, float16/bfloat16 included), and the
// derivative's values at hand-computed points. The GPU's memory check is in tests/cuda/test_fused_layers_gpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/derivatives.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;

namespace {

Array forward(const std::string& name, const Array& a) {
  if (name == "gelu_tanh") return gelu_tanh(a);
  if (name == "gelu") return gelu(a);
  if (name == "silu") return silu(a);
  if (name == "tanh") return tanh(a);
  return sigmoid(a);
}

/// The composed formulas of derivatives.hpp, op by op (the reference the fused functions must equal bit for bit).
Array composed(const std::string& name, const Array& g, const Array& a) {
  using namespace kiln::derivatives;
  if (name == "gelu_tanh") return g * gelu_tanh_grad(a);
  if (name == "gelu") return g * gelu_grad(a);
  if (name == "silu") return g * silu_grad(a);
  const Array out = forward(name, a);
  if (name == "tanh") return g * (1.0 - out * out);
  return g * out * (1.0 - out);
}

const std::vector<std::string> kNames{"gelu_tanh", "gelu", "silu", "tanh", "sigmoid"};

}  // namespace

TEST(ActivationBackward, BackwardEqualsTheComposedFormulaBitForBit) {
  for (DType t : {float32, float64, bfloat16, float16}) {
    const Array a = random::normal({3, 1000}, 0.0, 3.0, float32, cpu()).astype(t);
    const Array g = random::normal({3, 1000}, 0.0, 1.0, float32, cpu()).astype(t);
    for (const std::string& name : kNames) {
      Array x = a.copy();
      x.set_requires_grad(true);
      forward(name, x).backward(g);
      Array want;
      {
        NoGradGuard no_grad;
        want = composed(name, g, a);
      }
      ASSERT_EQ(x.grad().dtype(), t);
      EXPECT_TRUE(array_equal(x.grad(), want, /*equal_nan=*/true)) << name << " " << dtype_name(t);
    }
  }
}

TEST(ActivationBackward, DerivativesAtHandComputedPoints) {
  // x = 0: gelu' = gelu_tanh' = 1/2, silu' = 1/2, tanh' = 1, sigmoid' = 1/4. x = 1 (float64):
  // gelu' = Phi(1) + phi(1) = 0.8413447460685429 + 0.24197072451914337; silu' = s(1)(1 + 1 - s(1)), s(1) =
  // 0.7310585786300049; tanh' = 1 - tanh(1)^2 = 0.41997434161402614; sigmoid' = s(1)(1 - s(1)).
  const double s1 = 0.7310585786300049;
  const std::vector<std::pair<std::string, std::vector<double>>> want{
      {"gelu", {0.5, 0.8413447460685429 + 0.24197072451914337}},
      {"silu", {0.5, s1 * (2.0 - s1)}},
      {"tanh", {1.0, 0.41997434161402614}},
      {"sigmoid", {0.25, s1 * (1.0 - s1)}},
  };
  for (const auto& [name, values] : want) {
    Array x = from_data(std::vector<double>{0.0, 1.0}, Shape{2});
    x.set_requires_grad(true);
    forward(name, x).sum().backward();
    const std::vector<double> got = x.grad().to_vector<double>();
    EXPECT_NEAR(got[0], values[0], 1e-15) << name;
    EXPECT_NEAR(got[1], values[1], 1e-14) << name;
  }
  // gelu_tanh at 1: u = sqrt(2/pi)(1 + 0.044715), t = tanh(u); 0.5 (1 + t) + 0.5 (1 - t^2) sqrt(2/pi)(1 + 3 0.044715).
  const double u = std::sqrt(2.0 / M_PI) * 1.044715, t = std::tanh(u);
  Array x = from_data(std::vector<double>{0.0, 1.0}, Shape{2});
  x.set_requires_grad(true);
  gelu_tanh(x).sum().backward();
  EXPECT_NEAR(x.grad().to_vector<double>()[0], 0.5, 1e-15);
  EXPECT_NEAR(x.grad().to_vector<double>()[1], 0.5 * (1 + t) + 0.5 * (1 - t * t) * std::sqrt(2.0 / M_PI) * (1 + 3 * 0.044715),
              1e-14);
}

TEST(ActivationBackward, BroadcastGradientsReachTheInputsShape) {
  // An upstream gradient broadcast from a sum still gives the input's shape.
  for (const std::string& name : kNames) {
    Array x = random::normal({4, 5}, 0.0, 1.0, float64, cpu());
    x.set_requires_grad(true);
    forward(name, x).sum().backward();
    ASSERT_EQ(x.grad().shape(), (Shape{4, 5})) << name;
    Array want;
    {
      NoGradGuard no_grad;
      want = composed(name, ones({4, 5}, float64, cpu()), x.detach());
    }
    EXPECT_TRUE(array_equal(x.grad(), want)) << name;
  }
}
