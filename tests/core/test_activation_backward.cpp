// The activations' backward (GELU in both forms, SiLU, tanh, sigmoid) evaluated as one fused function: the same
// bits as the composed formula (float16/bfloat16 computed in float32 and rounded once, as PyTorch's), within one
// rounding of the float64 formula, and the derivative's values at hand-computed points. The GPU's memory check
// is in tests/cuda/test_fused_layers_gpu.cpp.
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

/// The composed formulas of derivatives.hpp, op by op, evaluated in `compute` (the reference the fused functions
/// must equal bit for bit). tanh and sigmoid differentiate from their output, which the forward rounded to a's
/// dtype.
Array composed(const std::string& name, const Array& g_in, const Array& a_in, DType compute) {
  using namespace kiln::derivatives;
  const Array g = g_in.astype(compute), a = a_in.astype(compute);
  if (name == "gelu_tanh") return g * gelu_tanh_grad(a);
  if (name == "gelu") return g * gelu_grad(a);
  if (name == "silu") return g * silu_grad(a);
  const Array out = forward(name, a_in).astype(compute);
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
        const bool half = t == bfloat16 || t == float16;
        want = composed(name, g, a, half ? float32 : t).astype(t);
      }
      ASSERT_EQ(x.grad().dtype(), t);
      EXPECT_TRUE(array_equal(x.grad(), want, /*equal_nan=*/true)) << name << " " << dtype_name(t);
    }
  }
}

// float16/bfloat16 gradients are the float64 formula's value rounded once, up to float32's own error: within one
// unit in the last place of the result plus 1e-5 |g| (float32 computes the formula's terms, of magnitude about 1,
// to ~1e-7; near the derivative's roots the value is tiny and that absolute error is what remains). Rounding each
// intermediate to the low precision instead misses by ~1e-3 |g| (checked too, so the bound means something).
TEST(ActivationBackward, LowPrecisionGradientsAreWithinOneRoundingOfFloat64) {
  for (DType t : {bfloat16, float16}) {
    const Array a = random::normal({4096}, 0.0, 3.0, float32, cpu()).astype(t);
    const Array g = random::normal({4096}, 0.0, 1.0, float32, cpu()).astype(t);
    for (const std::string& name : kNames) {
      Array x = a.copy();
      x.set_requires_grad(true);
      forward(name, x).backward(g);
      Array exact, rounded_each;
      {
        NoGradGuard no_grad;
        exact = composed(name, g, a, float64);
        rounded_each = composed(name, g, a, t);
      }
      const double eps = t == bfloat16 ? 0x1p-7 : 0x1p-10, tiny = t == bfloat16 ? 0x1p-126 : 0x1p-14;
      const Array bound = maximum(abs(exact), tiny) * eps + abs(g.astype(float64)) * 1e-5;
      const double worst = max(abs(x.grad().astype(float64) - exact) / bound).item<double>();
      EXPECT_LE(worst, 1.0) << name << " " << dtype_name(t);
      if (name.starts_with("gelu") || name == "silu") {  // formulas of a dozen ops: rounding each one shows
        EXPECT_GT(max(abs(rounded_each.astype(float64) - exact) / bound).item<double>(), 4.0) << name;
      }
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
      want = composed(name, ones({4, 5}, float64, cpu()), x.detach(), float64);
    }
    EXPECT_TRUE(array_equal(x.grad(), want)) << name;
  }
}
