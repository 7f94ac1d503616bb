// A run stopped at step k, saved with train::save_checkpoint and resumed in fresh objects (built from another
// seed, so nothing carries over but the file) ends with the same parameters, bit for bit, as the run that was
// never stopped: SGD with momentum and Adam, a per-step schedule, a GradScaler, gradient clipping, dropout (the
// generator's state) and a shuffled DataLoader (its position), stopped mid-epoch and at an epoch's end; and
// train::fit with checkpoint_every and resume after a failure in the middle of an epoch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/train.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using kiln_test::expect_error;

constexpr int64_t kEpochs = 3;  // of 6 batches each

struct Data {
  Array x, y;
  Data() {
    random::seed(7);
    x = random::normal({60, 8}, 0.0, 1.0, float32);
    y = random::randint(0, 3, {60}, int64);
  }
};

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("kiln_ckpt_" + name + "_" + std::to_string(::getpid()) + ".safetensors"))
      .string();
}

/// A run's objects, built from `seed` (the initialisation differs between seeds).
struct TrainingRun {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LRScheduler> schedule;
  optim::GradScaler scaler{{.init_scale = 1024.0, .growth_interval = 4}};
  std::unique_ptr<data::DataLoader> loader;
  train::Checkpoint ckpt;

  TrainingRun(const Data& data, bool adam, uint64_t seed) {
    random::seed(seed);
    model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(8, 16));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Dropout>(0.3));
    model->push_back(std::make_shared<nn::Linear>(16, 3));
    if (adam) {
      opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
      schedule = std::make_unique<optim::CosineAnnealingLR>(*opt, 12, 0.001);
    } else {
      opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      schedule = std::make_unique<optim::StepLR>(*opt, 4, 0.5);
    }
    loader = std::make_unique<data::DataLoader>(data.x, data.y,
                                                data::DataLoaderOptions{.batch_size = 10, .shuffle = true, .seed = 11});
    ckpt = {.model = model.get(),
            .optimizer = opt.get(),
            .scheduler = schedule.get(),
            .scaler = &scaler,
            .loader = loader.get()};
  }

  /// Trains from ckpt's position to the end, or until `stop_at` steps are done (then saves to `path`).
  void train(int64_t stop_at = -1, const std::string& path = {}) {
    model->train();
    for (; ckpt.epoch < kEpochs; ++ckpt.epoch, ckpt.batch = 0) {
      for (const data::Batch& b : *loader) {
        opt->zero_grad();
        const Array loss = nn::cross_entropy((*model)(b.x), b.y);
        scaler.scale(loss).backward();
        scaler.unscale(*opt);
        optim::clip_grad_norm(opt->parameters(), 0.5);
        scaler.step(*opt);
        scaler.update();
        schedule->step();
        ckpt.batch = b.index + 1;
        if (++ckpt.step == stop_at) {
          train::save_checkpoint(path, ckpt);
          return;
        }
      }
    }
  }
};

void expect_same_bits(const nn::Module& a, const nn::Module& b, const std::string& what) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << what << ": " << pa[i].first;
}

TEST(Checkpoint, AUserLoopResumedFromAnyStepEndsBitIdentical) {
  const Data data;
  for (bool adam : {false, true}) {
    TrainingRun straight(data, adam, 1);
    straight.train();
    for (int64_t stop : {1, 4, 6, 9, 17}) {  // mid-epoch, at an epoch's end (6), in the last epoch
      const std::string what = std::string(adam ? "Adam" : "SGD") + " stopped at step " + std::to_string(stop);
      const std::string path = temp_path("loop");
      {
        TrainingRun first(data, adam, 1);
        first.train(stop, path);
        random::seed(12345);  // whatever the process draws between the runs must not matter
        (void)random::uniform({100});
      }
      TrainingRun resumed(data, adam, 2);  // another initialisation: everything must come from the file
      train::load_checkpoint(path, resumed.ckpt);
      fs::remove(path);
      EXPECT_EQ(resumed.ckpt.step, stop) << what;
      EXPECT_EQ(resumed.ckpt.epoch * 6 + resumed.ckpt.batch, stop) << what;
      resumed.train();
      EXPECT_EQ(resumed.ckpt.step, kEpochs * 6) << what;
      EXPECT_EQ(resumed.opt->lr(), straight.opt->lr()) << what;
      EXPECT_EQ(resumed.scaler.get_scale(), straight.scaler.get_scale()) << what;
      expect_same_bits(*straight.model, *resumed.model, what);
    }
  }
}

TEST(Checkpoint, MissingOrExtraPartsAreRefusedBeforeAnythingChanges) {
  const Data data;
  const std::string path = temp_path("parts");
  TrainingRun first(data, false, 1);
  first.train(3, path);
  TrainingRun other(data, false, 2);
  train::Checkpoint no_scheduler = other.ckpt;
  no_scheduler.scheduler = nullptr;
  expect_error<ValueError>([&] { train::load_checkpoint(path, no_scheduler); },
                           {"holds a scheduler's state", "Checkpoint::scheduler is not set"});
  optim::GradScaler extra_scaler;
  train::Checkpoint model_only{.model = other.model.get(), .optimizer = other.opt.get()};
  const std::string bare = temp_path("bare");
  train::save_checkpoint(bare, model_only);
  train::Checkpoint wants_scaler{.model = other.model.get(), .optimizer = other.opt.get(), .scaler = &extra_scaler};
  expect_error<ValueError>([&] { train::load_checkpoint(bare, wants_scaler); },
                           {"holds no scaler state", "Checkpoint::scaler is set"});
  nn::save_safetensors(bare, first.model->state_dict());
  expect_error<ValueError>([&] { train::load_checkpoint(bare, model_only); }, {"unexpected entry"});
  EXPECT_EQ(other.ckpt.step, 0);
  fs::remove(path);
  fs::remove(bare);
}

TEST(Checkpoint, RandomStateIsStoredAsInt64BitPatterns) {
  const std::string path = temp_path("random");
  auto model = std::make_shared<nn::Linear>(2, 2);
  optim::SGD opt(model->parameters());
  random::set_state({.seed = 0xFEDCBA9876543210ULL, .offset = 0x8000000000000001ULL});
  train::save_checkpoint(path, {.model = model.get(), .optimizer = &opt, .epoch = 1, .batch = 2, .step = 3});
  const nn::StateDict state = nn::load_safetensors(path);
  // The words of the uint64 values, reinterpreted as two's complement int64.
  EXPECT_EQ(state.at("random").to_vector<int64_t>(),
            (std::vector<int64_t>{-0x0123456789ABCDF0LL, -0x7FFFFFFFFFFFFFFFLL}));
  EXPECT_EQ(state.at("position").to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  random::seed(0);
  train::Checkpoint back{.model = model.get(), .optimizer = &opt};
  train::load_checkpoint(path, back);
  EXPECT_EQ(random::get_state().seed, 0xFEDCBA9876543210ULL);
  EXPECT_EQ(random::get_state().offset, 0x8000000000000001ULL);
  EXPECT_EQ(back.step, 3);
  fs::remove(path);
}

TEST(Checkpoint, FitResumedAfterAFailureMidEpochEndsBitIdentical) {
  const Data data;
  auto fit_run = [&](uint64_t seed, const std::string& path, int64_t fail_at) {
    auto run = std::make_unique<TrainingRun>(data, true, seed);
    int64_t calls = 0;
    train::FitOptions options{.epochs = kEpochs,
                              .loss =
                                  [&](const Array& out, const Array& y) {
                                    if (++calls == fail_at) throw std::runtime_error("simulated crash");
                                    return nn::cross_entropy(out, y);
                                  },
                              .progress = false,
                              .max_grad_norm = 0.5,
                              .scheduler = run->schedule.get(),
                              .checkpoint = path,
                              .checkpoint_every = 4,
                              .resume = true};
    try {
      train::fit(*run->model, *run->opt, *run->loader, nullptr, options);
    } catch (const std::runtime_error&) {
      EXPECT_GT(fail_at, 0);
    }
    return run;
  };
  const std::string straight_path = temp_path("fit_straight"), path = temp_path("fit");
  const auto straight = fit_run(1, straight_path, -1);
  (void)fit_run(1, path, 11);  // dies in step 11 (epoch 2, batch 5); the checkpoint of step 8 remains
  EXPECT_EQ(nn::load_safetensors(path).at("position").to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 8}));
  const auto resumed = fit_run(2, path, -1);
  expect_same_bits(*straight->model, *resumed->model, "fit resumed from step 8");
  EXPECT_EQ(nn::load_safetensors(path).at("position").to_vector<int64_t>(),
            (std::vector<int64_t>{kEpochs, 0, kEpochs * 6}));
  fs::remove(path);
  fs::remove(straight_path);
}

TEST(Checkpoint, FitStoppedAtAnEpochsEndWithAPerEpochScheduleResumesBitIdentical) {
  const Data data;
  auto fit_run = [&](uint64_t seed, const std::string& path, int64_t stop_after) {
    auto run = std::make_unique<TrainingRun>(data, false, seed);
    train::FitOptions options{.epochs = kEpochs,
                              .progress = false,
                              .on_epoch_end = {[&](const train::EpochMetrics& m) { return m.epoch != stop_after; }},
                              .scheduler = run->schedule.get(),
                              .scheduler_per_epoch = true,
                              .checkpoint = path,
                              .resume = true};
    const auto history = train::fit(*run->model, *run->opt, *run->loader, nullptr, options);
    EXPECT_FALSE(history.empty());
    return run;
  };
  const std::string straight_path = temp_path("epoch_straight"), path = temp_path("epoch");
  const auto straight = fit_run(1, straight_path, -1);
  (void)fit_run(1, path, 1);  // stops after epoch 1: the checkpoint holds the start of epoch 2
  EXPECT_EQ(nn::load_safetensors(path).at("position").to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 6}));
  const auto resumed = fit_run(2, path, -1);
  expect_same_bits(*straight->model, *resumed->model, "fit resumed at epoch 2");
  EXPECT_EQ(resumed->schedule->count(), kEpochs);  // stepped once per epoch, across the stop
  EXPECT_EQ(resumed->opt->lr(), straight->opt->lr());
  fs::remove(path);
  fs::remove(straight_path);
}

TEST(TrainStep, ClipsGradientsAndStepsTheScheduleEachStep) {
  random::seed(3);
  auto model = std::make_shared<nn::Linear>(4, 2);
  optim::SGD opt(model->parameters(), {.lr = 1.0});
  optim::StepLR schedule(opt, 1, 0.5);
  const Array x = random::normal({5, 4}) * 100.0;  // gradients far above the clip
  const Array y = from_data(std::vector<int64_t>{0, 1, 0, 1, 1});
  std::vector<std::vector<float>> before;
  for (const Array& p : model->parameters()) before.push_back(p.to_vector<float>());
  train::TrainStep step(*model, opt, {.max_grad_norm = 0.25, .scheduler = &schedule});
  step(x, y);
  // lr 1 and a clipped gradient: the parameters moved by a vector of norm 0.25 (to float32's rounding).
  double moved = 0;
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> now = params[i].to_vector<float>();
    for (size_t j = 0; j < now.size(); ++j)
      moved += (now[j] - before[i][j]) * static_cast<double>(now[j] - before[i][j]);
  }
  EXPECT_NEAR(std::sqrt(moved), 0.25, 1e-6);
  EXPECT_EQ(opt.lr(), 0.5);
  EXPECT_EQ(schedule.count(), 1);
  expect_error<ValueError>([&] { train::TrainStep(*model, opt, {.graph = true, .scheduler = &schedule}); },
                           {"scheduler with graph"});
}

}  // namespace
}  // namespace kiln
