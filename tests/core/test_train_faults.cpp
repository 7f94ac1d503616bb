// Numerical faults in training steps (train::TrainStep, train::fit): a NaN or Inf loss is skipped without
// touching the parameters or the optimizer's state, stops the run with an error naming where, or (the default)
// goes on unchecked; a GradScaler's skipped steps are counted by the scaler, the step and fit's history and log.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/train.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using kiln_test::expect_error;

/// Cross entropy, made NaN (or +Inf) on the calls whose 1-based number is in `bad`.
train::LossFn loss_poisoned_at(std::vector<int64_t> bad, double poison = std::numeric_limits<double>::quiet_NaN()) {
  auto calls = std::make_shared<int64_t>(0);
  return [calls, bad, poison](const Array& output, const Array& target) {
    const Array loss = nn::cross_entropy(output, target);
    ++*calls;
    for (int64_t b : bad)
      if (b == *calls) return loss * poison;
    return loss;
  };
}

std::vector<std::vector<float>> values(const std::vector<Array>& arrays) {
  std::vector<std::vector<float>> v;
  for (const Array& a : arrays) v.push_back(a.to_vector<float>());
  return v;
}

std::vector<std::vector<float>> state_values(const optim::Optimizer& opt) {
  std::vector<std::vector<float>> v;
  for (const auto& [name, a] : opt.state_dict()) v.push_back(a.astype(float32).reshape({-1}).to_vector<float>());
  return v;
}

struct Batches {
  std::vector<Array> x, y;
  explicit Batches(int n) {
    random::seed(11);
    for (int i = 0; i < n; ++i) {
      x.push_back(random::normal({6, 4}, 0.0, 1.0, float32));
      y.push_back(random::randint(0, 3, {6}, int64));
    }
  }
};

std::shared_ptr<nn::Linear> model_from(uint64_t seed) {
  random::seed(seed);
  return std::make_shared<nn::Linear>(4, 3);
}

TEST(TrainFaults, SkippedNonFiniteLossLeavesParametersOptimizerAndScheduleAsTheyWere) {
  const Batches data(3);
  auto model = model_from(5);
  optim::Adam opt(model->parameters(), {.lr = 0.01});
  optim::StepLR schedule(opt, 1, 0.5);
  train::TrainStep step(
      *model, opt,
      {.loss = loss_poisoned_at({2}), .scheduler = &schedule, .on_non_finite_loss = train::NonFiniteLoss::skip});
  step(data.x[0], data.y[0]);
  const auto params = values(model->parameters());
  const auto state = state_values(opt);
  step(data.x[1], data.y[1]);  // NaN loss: skipped
  EXPECT_EQ(values(model->parameters()), params);
  EXPECT_EQ(state_values(opt), state);  // Adam's step count and moments too
  EXPECT_EQ(schedule.count(), 1);
  EXPECT_EQ(opt.lr(), 0.005);
  EXPECT_EQ(step.non_finite_skipped(), 1);
  EXPECT_EQ(step.steps(), 2);
  EXPECT_EQ(step.samples(), 6);  // the skipped batch adds nothing to the metrics
  EXPECT_TRUE(std::isfinite(step.mean_loss()));
  step(data.x[2], data.y[2]);

  // The reference: a run that never saw the poisoned batch.
  auto reference = model_from(5);
  optim::Adam reference_opt(reference->parameters(), {.lr = 0.01});
  optim::StepLR reference_schedule(reference_opt, 1, 0.5);
  train::TrainStep reference_step(*reference, reference_opt, {.scheduler = &reference_schedule});
  reference_step(data.x[0], data.y[0]);
  reference_step(data.x[2], data.y[2]);
  EXPECT_EQ(values(model->parameters()), values(reference->parameters()));
  EXPECT_EQ(state_values(opt), state_values(reference_opt));
}

TEST(TrainFaults, KeepGoingIsTheDefaultAndLetsNaNReachTheParameters) {
  const Batches data(2);
  auto model = model_from(5);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  train::TrainStep step(*model, opt, {.loss = loss_poisoned_at({2})});
  step(data.x[0], data.y[0]);
  step(data.x[1], data.y[1]);
  EXPECT_TRUE(std::isnan(model->parameters()[0].to_vector<float>()[0]));
  EXPECT_EQ(step.non_finite_skipped(), 0);
}

TEST(TrainFaults, RaiseNamesTheStepAndTheLossBeforeAnyUpdate) {
  const Batches data(2);
  auto model = model_from(5);
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  train::TrainStep step(*model, opt,
                        {.loss = loss_poisoned_at({2}, std::numeric_limits<double>::infinity()),
                         .on_non_finite_loss = train::NonFiniteLoss::raise});
  step(data.x[0], data.y[0]);
  const auto params = values(model->parameters());
  const auto state = state_values(opt);
  expect_error<train::NonFiniteLossError>([&] { step(data.x[1], data.y[1]); },
                                          {"TrainStep", "loss of step 2 is inf", "NonFiniteLoss::skip"});
  EXPECT_EQ(values(model->parameters()), params);
  EXPECT_EQ(state_values(opt), state);
}

/// 24 samples in batches of 6: 4 batches per epoch, unshuffled.
data::DataLoader loader_of_24() {
  random::seed(13);
  return data::DataLoader(random::normal({24, 4}, 0.0, 1.0, float32), random::randint(0, 3, {24}, int64),
                          {.batch_size = 6});
}

std::string temp_log(const std::string& name) {
  return (fs::temp_directory_path() / ("kiln_faults_" + name + "_" + std::to_string(::getpid()) + ".jsonl")).string();
}

TEST(TrainFaults, FitCountsSkippedStepsPerEpochInTheHistoryAndTheLog) {
  auto model = model_from(5);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  data::DataLoader loader = loader_of_24();
  const std::string log = temp_log("skip");
  fs::remove(log);
  std::ostringstream out;
  const auto history = train::fit(*model, opt, loader, nullptr,
                                  {.epochs = 2,
                                   .loss = loss_poisoned_at({2, 3, 7}),  // steps 2, 3 (epoch 1) and 7 (epoch 2)
                                   .log_path = log,
                                   .out = &out,
                                   .on_non_finite_loss = train::NonFiniteLoss::skip});
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].non_finite_skipped, 2);
  EXPECT_EQ(history[1].non_finite_skipped, 1);
  EXPECT_EQ(history[0].scaler_skipped, -1);  // no scaler
  EXPECT_TRUE(std::isfinite(history[0].train_loss));
  for (const Array& p : model->parameters())
    for (float v : p.to_vector<float>()) ASSERT_TRUE(std::isfinite(v));
  std::ifstream in(log);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_NE(first.find("\"non_finite_skipped\": 2"), std::string::npos) << first;
  EXPECT_NE(second.find("\"non_finite_skipped\": 1"), std::string::npos) << second;
  EXPECT_EQ(first.find("scaler_skipped"), std::string::npos) << first;
  EXPECT_NE(out.str().find("skipped (NaN/Inf loss) 2"), std::string::npos) << out.str();
  fs::remove(log);
}

TEST(TrainFaults, FitRaiseNamesTheEpochAndTheBatch) {
  auto model = model_from(5);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  data::DataLoader loader = loader_of_24();
  std::ostringstream out;
  expect_error<train::NonFiniteLossError>(
      [&] {
        train::fit(*model, opt, loader, nullptr,
                   {.epochs = 2,
                    .loss = loss_poisoned_at({7}),
                    .out = &out,
                    .on_non_finite_loss = train::NonFiniteLoss::raise});
      },
      {"train::fit: epoch 2, batch 3 of 4", "loss of step 7 is nan"});
}

// Loss scale 2^100 grows by 2^20 after every good step and falls by 2^20 after an overflow. A scaled float32
// loss or gradient overflows from 2^128 on, and these (loss about 1, gradients below 1) stay finite at 2^120:
// steps 1 and 2 run (2^100, 2^120), then every other step overflows at 2^140: steps 3, 5, 7, 9 are skipped.
optim::GradScalerOptions overflowing_every_other_step() {
  return {.init_scale = std::ldexp(1.0, 100),
          .growth_factor = std::ldexp(1.0, 20),
          .backoff_factor = std::ldexp(1.0, -20),
          .growth_interval = 1};
}

TEST(TrainFaults, GradScalerSkippedStepsAreCountedByTheScalerAndTheStep) {
  const Batches data(4);
  auto model = model_from(5);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  optim::GradScaler scaler(overflowing_every_other_step());
  train::TrainStep step(*model, opt, {.scaler = &scaler});
  step(data.x[0], data.y[0]);
  step(data.x[1], data.y[1]);
  EXPECT_EQ(scaler.skipped_steps(), 0);
  const auto params = values(model->parameters());
  step(data.x[2], data.y[2]);  // at 2^140: skipped
  EXPECT_EQ(values(model->parameters()), params);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(step.scaler_skipped(), 1);
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0, 120));
  step(data.x[3], data.y[3]);
  EXPECT_NE(values(model->parameters()), params);
  EXPECT_EQ(step.scaler_skipped(), 1);
  EXPECT_EQ(step.samples(), 24);  // a scaler-skipped step's loss is finite and counted
  expect_error<ValueError>([&] { train::TrainStep(*model, opt, {.graph = true, .scaler = &scaler}); },
                           {"GradScaler", "graph"});
}

TEST(TrainFaults, FitReportsTheGradScalersSkippedStepsPerEpoch) {
  auto model = model_from(5);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  optim::GradScaler scaler(overflowing_every_other_step());
  data::DataLoader loader = loader_of_24();
  const std::string log = temp_log("scaler");
  fs::remove(log);
  std::ostringstream out;
  // 3 epochs of 4 steps: skipped 3 (epoch 1), 5 and 7 (epoch 2), 9 and 11 (epoch 3).
  const auto history =
      train::fit(*model, opt, loader, nullptr, {.epochs = 3, .log_path = log, .out = &out, .scaler = &scaler});
  ASSERT_EQ(history.size(), 3u);
  EXPECT_EQ(history[0].scaler_skipped, 1);
  EXPECT_EQ(history[1].scaler_skipped, 2);
  EXPECT_EQ(history[2].scaler_skipped, 2);
  EXPECT_EQ(history[0].non_finite_skipped, -1);  // not checked
  EXPECT_EQ(scaler.skipped_steps(), 5);
  std::ifstream in(log);
  std::string line;
  std::getline(in, line);
  EXPECT_NE(line.find("\"scaler_skipped\": 1"), std::string::npos) << line;
  EXPECT_NE(out.str().find("skipped (scaler) 2"), std::string::npos) << out.str();
  fs::remove(log);
}

}  // namespace
}  // namespace kiln
