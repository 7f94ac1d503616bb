// Anomaly detection (set_detect_anomaly / DetectAnomalyGuard, as torch.autograd.detect_anomaly) and the error a
// custom backward gets for a gradient of the wrong shape: on every backend.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;

namespace {

/// y = sqrt(x) as a module: its gradient at x = 0 is infinite.
class SqrtModule : public nn::Module {
 public:
  Array forward(const Array& x) override { return sqrt(x); }
  std::string name() const override { return "SqrtModule"; }
};

std::vector<Device> devices() {
  std::vector<Device> d{cpu()};
  if (num_gpus() > 0) d.push_back(gpu(0));
  return d;
}

}  // namespace

TEST(AutogradAnomaly, OffByDefaultAndTheGuardRestoresTheMode) {
  EXPECT_FALSE(is_anomaly_enabled());
  {
    DetectAnomalyGuard guard;
    EXPECT_TRUE(is_anomaly_enabled());
    {
      DetectAnomalyGuard off(false);
      EXPECT_FALSE(is_anomaly_enabled());
    }
    EXPECT_TRUE(is_anomaly_enabled());
  }
  EXPECT_FALSE(is_anomaly_enabled());
}

TEST(AutogradAnomaly, NamesTheNodeTheInputAndTheModuleWhereANanOrInfFirstAppears) {
  for (const Device& d : devices()) {
    SCOPED_TRACE(d.str());
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<SqrtModule>());
    Array x = from_data({0.0f, 1.0f, 4.0f}, {3}, d).set_requires_grad();
    // Off: the infinite gradient reaches x silently, as in PyTorch.
    sum((*model)(x) * 2.0f).backward();
    const std::vector<float> g = x.grad().to_vector<float>();
    EXPECT_TRUE(std::isinf(g[0]));
    EXPECT_FLOAT_EQ(g[1], 1.0f);   // 2 * 1 / (2 sqrt(1))
    EXPECT_FLOAT_EQ(g[2], 0.5f);   // 2 * 1 / (2 sqrt(4))
    x.set_grad(Array());
    // On: the sqrt's backward is the first node with a non-finite gradient; the multiply before it is fine.
    DetectAnomalyGuard guard;
    kiln_test::expect_error<ValueError>([&] { sum((*model)(x) * 2.0f).backward(); },
                                        {"anomaly detection", "SqrtBackward's gradient for input 0",
                                         "NaN or Inf", "shape (3,)", "Sequential > SqrtModule"});
    // Finite gradients pass, equal to the ones computed with the mode off.
    Array y = from_data({1.0f, 4.0f}, {2}, d).set_requires_grad();
    sum((*model)(y) * 2.0f).backward();
    EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{1.0f, 0.5f}));
  }
}

TEST(AutogradAnomaly, AScopeLabelsTheOpsRecordedInsideIt) {
  DetectAnomalyGuard guard;
  Array x = zeros({2}).set_requires_grad();
  Array y;
  {
    AnomalyScope outer("block 3");
    AnomalyScope inner("attention");
    y = log(x);  // d log(x) / dx = 1 / x: infinite at 0
  }
  kiln_test::expect_error<ValueError>([&] { sum(y).backward(); }, {"LogBackward", "block 3 > attention"});
  // A non-finite gradient passed to backward() is named as such.
  Array z = ones({2}).set_requires_grad();
  kiln_test::expect_error<ValueError>([&] { (z * 3.0f).backward(full({2}, NAN)); },
                                      {"the gradient backward() starts from"});
}

TEST(AutogradAnomaly, ACustomBackwardOfTheWrongShapeIsNamedWithTheShapes) {
  const AutogradFunction bad{"MyOpBackward",
                             [](const std::vector<Array>& in, std::vector<Array>&) { return in[0] * 2.0; },
                             [](const Array& g, const std::vector<Array>&, const std::vector<bool>&) {
                               return std::vector<Array>{concatenate({g, g}, 0)};
                             }};
  Array x = ones({3}).set_requires_grad();
  kiln_test::expect_error<ShapeError>([&] { sum(bad.apply({x})).backward(); },
                                      {"MyOpBackward's backward returned a gradient of shape (6,)",
                                       "an input of shape (3,)"});
}
