// Optimizer state dicts are loaded strictly, as Module::load_state_dict is: a state of another kind, of another
// number of parameters, with a buffer missing, an extra key or a buffer of the wrong shape is refused with an
// error naming the key and the fix, and the optimizer is left as it was.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;

/// Two parameters (a 2x3 weight, a bias of 3) with gradients of ones: enough for a step of any optimizer.
struct Params {
  std::vector<Array> list;
  Params() {
    list = {zeros({2, 3}, float32), zeros({3}, float32)};
    for (Array& p : list) p.set_requires_grad(true);
  }
  void grads() {
    for (Array& p : list) p.set_grad(ones_like(p));
  }
};

nn::StateDict without(const nn::StateDict& state, const std::string& key) {
  nn::StateDict out;
  for (const auto& [k, v] : state)
    if (k != key) out.insert(k, v);
  return out;
}

TEST(OptimizerState, RecordsItsKindParameterCountAndWhichParametersHaveBuffers) {
  Params p;
  optim::Adam adam(p.list);
  p.list[0].set_grad(ones_like(p.list[0]));  // only the weight steps: the bias has no moments yet
  adam.step();
  const nn::StateDict s = adam.state_dict();
  const std::vector<uint8_t> kind = s.at("optimizer").to_vector<uint8_t>();
  EXPECT_EQ(std::string(kind.begin(), kind.end()), "Adam");
  EXPECT_EQ(s.at("params_with_state").astype(uint8).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(s.at("step").item<int64_t>(), 1);
  EXPECT_NE(s.find("exp_avg.0"), nullptr);
  EXPECT_EQ(s.find("exp_avg.1"), nullptr);
  EXPECT_EQ(s.size(), 6u);  // lr, step, optimizer, params_with_state, exp_avg.0, exp_avg_sq.0
}

TEST(OptimizerState, AMissingMomentBufferIsRefusedByName) {
  Params p;
  optim::Adam adam(p.list);
  p.grads();
  adam.step();
  const nn::StateDict broken = without(adam.state_dict(), "exp_avg_sq.1");
  Params q;
  optim::Adam fresh(q.list);
  expect_error<ValueError>([&] { fresh.load_state_dict(broken); },
                           {"Adam::load_state_dict", "missing keys: \"exp_avg_sq.1\"", "unexpected keys: none"});
  EXPECT_EQ(fresh.state_dict().at("step").item<int64_t>(), 0) << "a refused state changes nothing";
}

TEST(OptimizerState, AnUnexpectedKeyIsRefusedByName) {
  Params p;
  optim::SGD sgd(p.list, {.lr = 0.1, .momentum = 0.9});
  p.grads();
  sgd.step();
  nn::StateDict extra = sgd.state_dict();
  extra.insert("model.0.weight", zeros({2, 3}, float32));
  Params q;
  optim::SGD other(q.list, {.lr = 0.1, .momentum = 0.9});
  expect_error<ValueError>([&] { other.load_state_dict(extra); },
                           {"SGD::load_state_dict", "missing keys: none", "unexpected keys: \"model.0.weight\""});
}

TEST(OptimizerState, SgdStateIntoAdamIsRefused) {
  Params p;
  optim::SGD sgd(p.list, {.lr = 0.1});  // no momentum: no buffers at all, only the kind tells it apart
  p.grads();
  sgd.step();
  Params q;
  optim::Adam adam(q.list);
  expect_error<ValueError>([&] { adam.load_state_dict(sgd.state_dict()); },
                           {"Adam::load_state_dict", "a SGD optimizer, not of a Adam", "the kind that saved it"});
  optim::AdamW adamw(q.list);
  optim::Adam adam2(p.list);
  expect_error<ValueError>([&] { adamw.load_state_dict(adam2.state_dict()); }, {"not of a AdamW"});
}

TEST(OptimizerState, WrongShapesAndParameterCountsAreRefused) {
  Params p;
  optim::SGD sgd(p.list, {.lr = 0.1, .momentum = 0.9});
  p.grads();
  sgd.step();
  nn::StateDict reshaped = sgd.state_dict();
  reshaped.insert("momentum_buffer.0", zeros({3, 2}, float32));
  Params q;
  optim::SGD other(q.list, {.lr = 0.1, .momentum = 0.9});
  expect_error<ShapeError>([&] { other.load_state_dict(reshaped); },
                           {"\"momentum_buffer.0\" has shape (3, 2)", "parameter 0 has shape (2, 3)"});
  std::vector<Array> one = {zeros({2, 3}, float32)};
  one[0].set_requires_grad(true);
  optim::SGD fewer(one, {.lr = 0.1, .momentum = 0.9});
  expect_error<ValueError>([&] { fewer.load_state_dict(sgd.state_dict()); },
                           {"the state is of 2 parameters but this optimizer has 1", "same parameters"});
  expect_error<ValueError>([&] { fewer.load_state_dict(nn::StateDict()); }, {"no \"optimizer\" entry"});
}

TEST(OptimizerState, AStateLoadedIntoAFreshOptimizerContinuesBitForBit) {
  for (bool adam : {false, true}) {
    Params p, q;
    auto make = [&](std::vector<Array> list) -> std::unique_ptr<optim::Optimizer> {
      if (adam) return std::make_unique<optim::Adam>(std::move(list), optim::AdamOptions{.lr = 0.1});
      return std::make_unique<optim::SGD>(std::move(list), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    };
    auto a = make(p.list);
    for (int i = 0; i < 3; ++i) {
      p.grads();
      a->step();
    }
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < p.list.size(); ++i) q.list[i].assign(p.list[i]);
    }
    auto b = make(q.list);
    b->load_state_dict(a->state_dict());
    p.grads();
    q.grads();
    a->step();
    b->step();
    for (size_t i = 0; i < p.list.size(); ++i)
      EXPECT_EQ(p.list[i].to_vector<float>(), q.list[i].to_vector<float>()) << (adam ? "Adam " : "SGD ") << i;
  }
}

TEST(OptimizerState, AScheduleBuiltAfterLoadingResumesItsBaseLrAndCount) {
  Params p;
  optim::SGD sgd(p.list, {.lr = 0.8});
  optim::StepLR schedule(sgd, 2, 0.5);
  for (int i = 0; i < 5; ++i) schedule.step();  // lr 0.8 * 0.5^2 = 0.2
  EXPECT_EQ(sgd.lr(), 0.2);
  const nn::StateDict saved_opt = sgd.state_dict(), saved_schedule = schedule.state_dict();
  Params q;
  optim::SGD fresh(q.list, {.lr = 0.8});
  fresh.load_state_dict(saved_opt);         // lr 0.2 now
  optim::StepLR rebuilt(fresh, 2, 0.5);     // would take 0.2 as its base
  rebuilt.load_state_dict(saved_schedule);  // base 0.8 and count 5 restored
  EXPECT_EQ(rebuilt.base_lr(), 0.8);
  EXPECT_EQ(rebuilt.count(), 5);
  rebuilt.step();  // count 6: 0.8 * 0.5^3
  EXPECT_EQ(fresh.lr(), 0.1);
  nn::StateDict extra = saved_schedule;
  extra.insert("gamma", scalar_array(0.5));
  expect_error<ValueError>([&] { rebuilt.load_state_dict(extra); }, {"unexpected keys: \"gamma\""});
  optim::GradScaler scaler;
  expect_error<ValueError>([&] { scaler.load_state_dict(saved_schedule); },
                           {"GradScaler::load_state_dict", "missing keys: \"scale\", \"growth_tracker\""});
}

}  // namespace
}  // namespace kiln
