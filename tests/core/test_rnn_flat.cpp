// The recurrent layers' flat weight space (nn::RNNBase::flatten_parameters, as PyTorch's): every parameter a
// contiguous view of one array at offsets computed here by hand (PyTorch's order, packed, on the CPU); optimizer
// steps write through the views (checked against p - lr * g computed from copies); to() lays the moved parameters
// out again and retires the old arrays; a parameter replaced by the user is read as it is; and a float64 check of
// every parameter's gradient against central differences taken by perturbing the flat space itself.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

std::vector<double> values(const Array& a) { return a.detach().to(cpu()).astype(float64).to_vector<double>(); }

void expect_views_in_order(nn::RNNBase& m, const std::vector<std::string>& names) {
  const Array& space = m.flat_weights();
  ASSERT_TRUE(space.defined());
  const auto* base = static_cast<const char*>(space.data_ptr());
  int64_t at = 0;  // PyTorch's order, packed: each parameter right after the previous one
  for (const std::string& name : names) {
    const Array& p = m.parameter(name);
    EXPECT_TRUE(p.shares_storage(space)) << name;
    EXPECT_TRUE(p.is_contiguous()) << name;
    EXPECT_EQ(p.data_ptr(), base + at * itemsize(p.dtype())) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
    at += p.size();
  }
  EXPECT_EQ(space.size(), at);
}

TEST(RnnFlat, ParametersAreViewsOfOneSpaceInPyTorchsOrder) {
  nn::LSTM lstm(3, 4, {.num_layers = 2, .bidirectional = true});
  expect_views_in_order(
      lstm, {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse", "weight_hh_l0_reverse",
             "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
             "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  // 16*3 + 16*4 + 16 + 16 per direction of layer 0, 16*8 + 16*4 + 32 after
  EXPECT_EQ(lstm.flat_weights().size(), 2 * (48 + 64 + 32) + 2 * (128 + 64 + 32));
  nn::LSTM proj(3, 4, {.bias = false, .proj_size = 2});
  expect_views_in_order(proj, {"weight_ih_l0", "weight_hh_l0", "weight_hr_l0"});
  nn::GRU gru(2, 3);
  expect_views_in_order(gru, {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"});
  lstm.flatten_parameters();  // already laid out: nothing moves
  EXPECT_EQ(lstm.parameter("weight_ih_l0").data_ptr(), lstm.flat_weights().data_ptr());
}

TEST(RnnFlat, OptimizerStepsWriteThroughTheViews) {
  random::seed(3);
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  const Array x = random::normal({5, 2, 3}, float32, cpu());
  sum(lstm(x) * lstm(x)).backward();
  std::vector<std::vector<double>> before, grads;
  for (const Array& p : lstm.parameters()) {
    before.push_back(values(p));
    grads.push_back(values(p.grad()));
  }
  optim::SGD sgd(lstm.parameters(), {.lr = 0.1});
  sgd.step();
  const std::vector<double> space = values(lstm.flat_weights());
  size_t i = 0;
  int64_t at = 0;
  for (const auto& [name, p] : lstm.named_parameters()) {
    const std::vector<double> now = values(p);
    for (size_t j = 0; j < now.size(); ++j) {
      EXPECT_NEAR(now[j], before[i][j] - 0.1 * grads[i][j], 1e-6) << name << " element " << j;
      EXPECT_EQ(space[static_cast<size_t>(at) + j], now[j]) << name << " element " << j;
    }
    at += p.size();
    ++i;
  }
  // The next forward reads the stepped values: the same as a layer loaded with them.
  nn::LSTM copy(3, 4, {.num_layers = 2});
  copy.load_state_dict(lstm.state_dict());
  const std::vector<double> got = values(lstm(x)), want = values(copy(x));
  for (size_t j = 0; j < got.size(); ++j) EXPECT_EQ(got[j], want[j]) << j;
  // Adam's multi-tensor update over the views of one array (outputs side by side, never overlapping).
  lstm.zero_grad();
  sum(lstm(x)).backward();
  optim::Adam adam(lstm.parameters(), {.lr = 0.01});
  EXPECT_NO_THROW(adam.step());
  expect_views_in_order(lstm, {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l1",
                               "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"});
}

TEST(RnnFlat, ToLaysTheMovedParametersOutAgainAndRetiresTheOldOnes) {
  random::seed(4);
  nn::GRU gru(2, 3, {.num_layers = 2, .bidirectional = true});
  const Array x = random::normal({4, 2, 2}, float32, cpu());
  sum(gru(x)).backward();
  const Array old = gru.parameter("weight_hh_l1_reverse");
  const std::vector<double> value = values(old), grad = values(old.grad());
  gru.to(float64);
  EXPECT_EQ(gru.flat_weights().dtype(), float64);
  expect_views_in_order(
      gru, {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse", "weight_hh_l0_reverse",
            "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
            "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  const Array& now = gru.parameter("weight_hh_l1_reverse");
  EXPECT_EQ(now.dtype(), float64);
  const std::vector<double> v = values(now), g = values(now.grad());
  for (size_t j = 0; j < v.size(); ++j) {
    EXPECT_EQ(v[j], value[j]) << j;  // float32 values are exact in float64
    EXPECT_EQ(g[j], grad[j]) << j;
  }
  EXPECT_FALSE(retired_reason(old).empty());
  EXPECT_NO_THROW((void)gru(x.astype(float64)));
}

TEST(RnnFlat, AReplacedParameterIsReadAsItIsUntilFlattenedAgain) {
  random::seed(5);
  nn::LSTM lstm(3, 4);
  const Array x = random::normal({3, 2, 3}, float32, cpu());
  Array replacement = random::normal({16, 4}, float32, cpu());
  replacement.set_requires_grad();
  lstm.parameter("weight_hh_l0") = replacement;
  EXPECT_FALSE(lstm.parameter("weight_hh_l0").shares_storage(lstm.flat_weights()));
  nn::LSTM copy(3, 4);
  copy.load_state_dict(lstm.state_dict());
  const Array y = lstm(x);
  const std::vector<double> got = values(y), want = values(copy(x));
  for (size_t j = 0; j < got.size(); ++j) EXPECT_EQ(got[j], want[j]) << j;
  sum(y).backward();
  EXPECT_TRUE(replacement.grad().defined());  // the user's array trains
  lstm.flatten_parameters();
  expect_views_in_order(lstm, {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"});
  const std::vector<double> r = values(replacement), now = values(lstm.parameter("weight_hh_l0"));
  for (size_t j = 0; j < r.size(); ++j) EXPECT_EQ(now[j], r[j]) << j;
  const std::vector<double> again = values(lstm(x));
  for (size_t j = 0; j < got.size(); ++j) EXPECT_EQ(again[j], got[j]) << j;
}

/// L = sum(y * v) + sum(h_n * u) (+ sum(c_n * w)) for fixed v, u, w: every parameter's analytic gradient against
/// central differences, each element perturbed through the flat space (the views must see it).
void gradcheck_parameters(nn::RNNBase& m, bool lstm, const std::string& what) {
  random::seed(11);
  const Array x = random::normal({3, 2, m.input_size()}, float64, cpu());
  auto loss = [&]() {
    Array y, h, c;
    if (lstm) {
      std::tie(y, h, c) = static_cast<nn::LSTM&>(m).forward(x, Array(), Array());
    } else if (auto* gru = dynamic_cast<nn::GRU*>(&m)) {
      std::tie(y, h) = gru->forward(x, Array());
    } else {
      std::tie(y, h) = static_cast<nn::RNN&>(m).forward(x, Array());
    }
    Array l = sum(y * cos(arange(static_cast<double>(y.size()), float64, cpu()).reshape(y.shape()))) +
              sum(h * sin(arange(static_cast<double>(h.size()), float64, cpu()).reshape(h.shape())));
    if (lstm) l = l + sum(c * c);
    return l;
  };
  m.zero_grad();
  loss().backward();
  Array space = m.flat_weights();
  const auto* base = static_cast<const char*>(space.data_ptr());
  const double eps = 1e-6;
  for (const auto& [name, p] : m.named_parameters()) {
    const std::vector<double> analytic = values(p.grad());
    const int64_t at = (static_cast<const char*>(p.data_ptr()) - base) / 8;
    for (int64_t j = 0; j < p.size(); ++j) {
      NoGradGuard no_grad;
      const double v0 = values(space.slice(0, at + j, at + j + 1))[0];
      space.slice(0, at + j, at + j + 1).assign(full({1}, v0 + eps, float64, cpu()));
      const double up = loss().item<double>();
      space.slice(0, at + j, at + j + 1).assign(full({1}, v0 - eps, float64, cpu()));
      const double down = loss().item<double>();
      space.slice(0, at + j, at + j + 1).assign(full({1}, v0, float64, cpu()));
      const double numeric = (up - down) / (2 * eps);
      ASSERT_NEAR(analytic[static_cast<size_t>(j)], numeric, 1e-6 * (1 + std::abs(numeric)))
          << what << " " << name << " element " << j;
    }
  }
}

TEST(RnnFlat, EveryParametersGradientMatchesCentralDifferencesInFloat64) {
  const nn::RNNOptions o{.num_layers = 2, .bidirectional = true, .dtype = float64};
  {
    nn::LSTM m(2, 2, o);
    gradcheck_parameters(m, true, "LSTM");
  }
  {
    auto p = o;
    p.proj_size = 1;
    nn::LSTM m(2, 2, p);
    gradcheck_parameters(m, true, "LSTM proj_size 1");
  }
  {
    nn::GRU m(2, 2, o);
    gradcheck_parameters(m, false, "GRU");
  }
  {
    auto p = o;
    p.bias = false;
    nn::RNN m(2, 2, p);
    gradcheck_parameters(m, false, "RNN without bias");
  }
}

}  // namespace
}  // namespace kiln
