// Training on a GPU: a whole step (forward with dropout, cross_entropy, backward, optimizer, metric sums) makes
// no host synchronisation (SyncDebugGuard in error mode), and the same step captured in a CUDA graph and
// replayed trains the same model bit for bit as the eager steps (dropout draws advance in replays as in eager
// calls), for SGD with momentum and capturable Adam; a batch of another shape runs eagerly; channels-last images
// reach the captured forward channels-last. The DataLoader's
// prefetch copies complete while the compute stream is held busy (they overlap compute).
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "kiln/cuda.hpp"
#include "kiln/debug.hpp"
#include "kiln/kiln.hpp"
#include "kiln/train.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

std::shared_ptr<nn::Sequential> mlp(Device d, uint64_t seed) {
  random::seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(20, 32, true, float32, d));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Dropout>(0.5));
  m->push_back(std::make_shared<nn::Linear>(32, 5, true, float32, d));
  return m;
}

struct Data {
  Array x, y;
};

Data data(int64_t n) {
  random::seed(11);
  return {random::normal({n, 20}, 0.0, 1.0, float32, cpu()), random::randint(0, 5, {n}, int64, cpu())};
}

TEST(TrainGpu, AStepMakesNoHostSynchronisation) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const Data set = data(400);
  for (bool adam : {false, true}) {
    auto model = mlp(d, 1);
    std::unique_ptr<optim::Optimizer> opt;
    if (adam)
      opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
    else
      opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    data::DataLoader loader(set.x, set.y, {.batch_size = 50, .shuffle = true, .device = d});
    train::TrainStep step(*model, *opt);
    int64_t steps = 0;
    for (const data::Batch& b : loader) {
      if (steps == 1) {
        // Every step after the first (which compiles and creates state) runs under the guard.
        SyncDebugGuard guard(SyncDebugMode::error);
        step(b.x, b.y);
        EXPECT_EQ(guard.counters().syncs, 0u) << (adam ? "adam" : "sgd");
        EXPECT_EQ(guard.counters().d2h_copies, 0u);
      } else {
        step(b.x, b.y);
      }
      ++steps;
    }
    {
      SyncDebugGuard guard(SyncDebugMode::error);
      for (const data::Batch& b : loader) step(b.x, b.y);  // a whole epoch, the loader's prefetch included
      EXPECT_EQ(guard.counters().syncs, 0u);
    }
    EXPECT_EQ(step.samples(), 800);
    EXPECT_GT(step.mean_loss(), 0.0);  // the one read (synchronises)
  }
}

/// Trains a fresh model for `steps` batches of 40 (the last `odd` rows as one smaller batch) and returns its
/// parameters and the mean loss.
std::pair<std::vector<std::vector<float>>, double> run(bool graph, bool adam, int64_t odd = 0) {
  const Device d = gpu(0);
  const Data set = data(400 + odd);
  auto model = mlp(d, 2);
  std::unique_ptr<optim::Optimizer> opt;
  if (adam)
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3, .capturable = true});
  else
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  random::seed(3);  // the dropout draws start from the same state in both runs
  train::TrainStep step(*model, *opt, {.graph = graph, .warmup = 2});
  const Array x = set.x.to(d), y = set.y.to(d);
  for (int64_t start = 0; start < 400 + odd; start += 40)
    step(x.slice(0, start, std::min<int64_t>(start + 40, 400 + odd)),
         y.slice(0, start, std::min<int64_t>(start + 40, 400 + odd)));
  if (graph) {
    EXPECT_TRUE(step.graphed());
    EXPECT_EQ(step.replays(), 8);  // 10 batches of 40: 2 eager, 1 captured then replayed, 7 replays
    EXPECT_GT(step.graph_nodes(), 10u);
  }
  std::vector<std::vector<float>> params;
  for (const Array& p : model->parameters()) params.push_back(p.to_vector<float>());
  return {params, step.mean_loss()};
}

TEST(TrainGpu, AGraphedStepTrainsTheSameModelAsEagerSteps) {
  KILN_REQUIRE_GPU();
  for (bool adam : {false, true}) {
    const auto eager = run(false, adam), graphed = run(true, adam);
    ASSERT_EQ(eager.first.size(), graphed.first.size());
    for (size_t i = 0; i < eager.first.size(); ++i)
      EXPECT_EQ(eager.first[i], graphed.first[i]) << (adam ? "adam" : "sgd") << ", parameter " << i;
    EXPECT_EQ(eager.second, graphed.second) << "the mean loss";
  }
  // A last batch of 7 rows runs eagerly after the replays, with the same result as the eager run.
  const auto eager = run(false, false, 7), graphed = run(true, false, 7);
  for (size_t i = 0; i < eager.first.size(); ++i) EXPECT_EQ(eager.first[i], graphed.first[i]) << "parameter " << i;
}

/// Records the layout of the images its forward sees (the graph's static input during the capture).
class LayoutProbe final : public nn::Module {
 public:
  explicit LayoutProbe(Device d)
      : conv_(register_module("conv", std::make_shared<nn::Conv2d>(3, 4, std::pair<int64_t, int64_t>{3, 3},
                                                                   nn::Conv2dOptions{}, float32, d))) {}
  Array forward(const Array& x) override {
    seen_channels_last.push_back(is_channels_last(x) && !x.is_contiguous());
    return mean(conv_->forward(x), {2, 3});
  }
  std::string name() const override { return "LayoutProbe"; }
  std::vector<bool> seen_channels_last;

 private:
  std::shared_ptr<nn::Conv2d> conv_;
};

TEST(TrainGpu, AGraphedStepKeepsChannelsLastImagesChannelsLast) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  std::vector<std::vector<float>> params;
  for (bool graph : {false, true}) {
    random::seed(3);
    LayoutProbe probe(d);
    probe.to_channels_last();
    optim::SGD opt(probe.parameters(), {.lr = 0.1, .momentum = 0.9});
    train::TrainStep step(probe, opt, {.graph = graph, .warmup = 1});
    for (int i = 0; i < 4; ++i) {
      random::seed(20 + i);
      const Array x = to_channels_last(random::normal({2, 3, 6, 6}, 0.0, 1.0, float32, d));
      step(x, random::randint(0, 4, {2}, int64, d));
    }
    // Eager: four forwards; graphed: the warm-up step and the capture (replays do not call forward).
    ASSERT_EQ(probe.seen_channels_last.size(), graph ? 2u : 4u);
    for (size_t i = 0; i < probe.seen_channels_last.size(); ++i)
      EXPECT_TRUE(probe.seen_channels_last[i]) << (graph ? "graphed" : "eager") << " forward " << i;
    params.emplace_back();
    for (const Array& p : probe.parameters()) {
      const std::vector<float> v = p.to_vector<float>();
      params.back().insert(params.back().end(), v.begin(), v.end());
    }
  }
  // The replays train as the eager steps (cuDNN may pick another weight-gradient algorithm inside a capture).
  ASSERT_EQ(params[0].size(), params[1].size());
  for (size_t i = 0; i < params[0].size(); ++i) EXPECT_NEAR(params[0][i], params[1][i], 1e-5) << "parameter " << i;
}

TEST(TrainGpu, FitWithGraphReachesTheEagerLoss) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const Data set = data(400);
  std::vector<double> losses;
  for (bool graph : {false, true}) {
    auto model = mlp(d, 4);
    optim::SGD opt(model->parameters(), {.lr = 0.05});
    data::DataLoader loader(set.x, set.y, {.batch_size = 40, .shuffle = true, .seed = 1, .device = d});
    random::seed(5);
    const auto history = train::fit(*model, opt, loader, nullptr, {.epochs = 2, .progress = false, .graph = graph});
    losses.push_back(history.back().train_loss);
  }
  EXPECT_EQ(losses[0], losses[1]);
}

TEST(DataLoaderGpu, PrefetchCopiesRunWhileTheComputeStreamIsBusy) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  // A kernel that holds the compute stream until the host sets a flag in pinned memory (UVA: the device reads it).
  const RawModule m(R"(extern "C" __global__ void hold(volatile int* flag) { while (*flag == 0) {} })", {.device = d});
  const Array flag = zeros({1}, int32, cpu(), {.pinned = true});
  auto* host_flag = static_cast<volatile int32_t*>(flag.data_ptr());
  const int64_t rows = 256, cols = 4096;  // 4 MiB batches
  const Array x = arange(8 * rows * cols, float32, cpu()).reshape({8 * rows, cols}), y = arange(8 * rows, int64, cpu());
  // One worker preparing one batch ahead: batch 2 is assembled and copied only after batch 1 is taken, which
  // happens after the hold below was queued, so its copy cannot have been queued before the hold.
  data::DataLoader loader(x, y, {.batch_size = rows, .workers = 1, .prefetch = 1, .device = d});
  auto epoch = loader.epoch();
  const data::Batch b0 = *epoch->next();
  synchronize(d);
  m.function("hold").launch(Dim3(1), Dim3(1), static_cast<int32_t*>(flag.data_ptr()));
  const data::Batch b1 = *epoch->next();
  const data::Batch b2 = *epoch->next();
  ASSERT_TRUE(b2.ready.has_value());
  bool copied = false;
  for (int i = 0; i < 10000 && !copied; ++i) {  // up to 10 s
    copied = b2.ready->query();
    if (!copied) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool compute_busy = !Stream::current(d).query();
  *host_flag = 1;  // release the compute stream whatever happened
  synchronize(d);
  EXPECT_TRUE(copied) << "batch 2's copy did not finish while the compute stream was held: it waits for compute";
  EXPECT_TRUE(compute_busy) << "the hold kernel ended early: the test proved nothing";
  // The batches hold the right rows (no shuffle: batch k is rows k*256 ...).
  EXPECT_EQ(b2.y.to_vector<int64_t>()[0], 2 * rows);
  EXPECT_EQ(b2.x.index({0, 0}).item<float>(), static_cast<float>(2 * rows * cols));
  EXPECT_EQ(b1.x.index({rows - 1, cols - 1}).item<float>(), static_cast<float>(2 * rows * cols - 1));
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
