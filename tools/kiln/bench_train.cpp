// `kiln bench train`: seconds per epoch of Chainer's MNIST MLP (784-100-100-10, dropout 0.5) and of
// 784-1000-1000-10 with Adam, on Fashion-MNIST's 60000 images in batches of 100, fed the ways
// bench/peers/torch_bench.py feeds PyTorch (the same records; cases in bench/peers/common.py, TRAIN_CASES):
// hostbatches (each batch gathered on the host and copied at the step), device (the set on the GPU, batches
// gathered there), graph (the whole step replayed from a CUDA graph, batches copied into its static inputs),
// cpu_ (the CPU, host batches). An epoch is timed by the host clock from a synchronisation to the read of the
// epoch's loss (which waits for the device's work); the median of the epochs after the first is recorded
// (five epochs: the median of four). --quick trains on the first 12000 images (the peer's --quick does the same), two
// epochs per case.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "kiln/train.hpp"
#include "train.hpp"

namespace kiln_cli {

using namespace kiln;

namespace {

struct TrainData {
  Array x, y;  // host: (N, 784) float32, (N,) int64
  std::string source;
};

TrainData train_data(bool quick, bool smoke) {
  const char* env = std::getenv("KILN_FASHION_MNIST");
  const std::string dir = env && *env ? env : data::kFashionMnistDir;
  TrainData d;
  if (std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") ||
      std::filesystem::exists(dir + "/train-images-idx3-ubyte")) {
    const data::Dataset set = data::fashion_mnist(true, dir);
    d = {set.images, set.labels, "Fashion-MNIST"};
  } else {
    random::seed(0);
    d = {random::uniform({60000, 784}, 0.0, 1.0, float32, cpu()), random::randint(0, 10, {60000}, int64, cpu()),
         "random data of Fashion-MNIST's shape (no data set in " + dir + ")"};
  }
  const int64_t keep = smoke ? 2000 : quick ? 12000 : d.y.size();  // --quick: a fifth of the set
  d = {d.x.slice(0, 0, keep), d.y.slice(0, 0, keep), d.source};
  return d;
}

enum class Feed { Host, Device, Graph };

struct EpochResult {
  double seconds = 0;  // median of the epochs after the first
  double loss = 0;     // mean training loss of the last epoch
};

EpochResult epochs(const std::string& name, const TrainData& data, nn::Module& model, optim::Optimizer& opt, Device d,
                   Feed feed, int count) {
  train::TrainStep step(model, opt, {.accuracy = false, .graph = feed == Feed::Graph});
  const int64_t n = data.y.size(), batch = 100;
  Array xd, yd;
  if (feed != Feed::Host) {
    xd = data.x.to(d);
    yd = data.y.to(d);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(0);
  std::vector<double> times;
  EpochResult r;
  for (int e = 0; e < count; ++e) {
    step.reset_metrics();
    synchronize(d);
    const double t0 = now_s();
    std::shuffle(order.begin(), order.end(), rng);
    const Array perm = from_data(order, Shape{n});
    const Array perm_d = feed == Feed::Host ? perm : perm.to(d);
    for (int64_t i = 0; i < n; i += batch) {
      const Array idx = perm_d.slice(0, i, std::min(i + batch, n));
      if (feed == Feed::Host)
        step(take(data.x, idx, 0).to(d), take(data.y, idx, 0).to(d));
      else
        step(take(xd, idx, 0), take(yd, idx, 0));
    }
    r.loss = step.mean_loss();  // waits for the epoch's work
    times.push_back(now_s() - t0);
    // Each epoch as it ends: the spread behind the median, for records compared across rounds.
    if (e == 0)
      fmt::print("  {} epochs: {}", name, format_seconds(times.back()));
    else
      fmt::print(", {}", format_seconds(times.back()));
  }
  fmt::print("\n");
  // The median of the epochs after the first, as the peer's statistics.median (the middle two averaged).
  r.seconds = summarize(std::vector<double>(times.begin() + 1, times.end())).median;
  return r;
}

}  // namespace

void run_train(BenchContext& ctx) {
  const bool smoke = std::getenv("KILN_BENCH_SMOKE") != nullptr;
  const TrainData data = train_data(ctx.quick, smoke);
  const int count = ctx.quick ? 2 : 5;  // bench/peers/torch_bench.py trains as many epochs
  title("train", fmt::format("seconds per epoch, batch 100, {} images of {}", data.y.size(), data.source));
  struct Case {
    std::string name;
    int64_t units;
    bool dropout;
    bool adam;
    double lr, momentum;
    Feed feed;
    bool on_gpu;
  };
  const std::vector<Case> cases = {
      {"mlp100_sgd_hostbatches", 100, true, false, 0.01, 0.0, Feed::Host, true},
      {"mlp100_sgdm_device", 100, true, false, 0.1, 0.9, Feed::Device, true},
      {"mlp1000_adam_device", 1000, false, true, 1e-3, 0.0, Feed::Device, true},
      {"mlp1000_adam_graph", 1000, false, true, 1e-3, 0.0, Feed::Graph, true},
      {"cpu_mlp100_sgd", 100, true, false, 0.01, 0.0, Feed::Host, false},
      {"cpu_mlp1000_adam", 1000, false, true, 1e-3, 0.0, Feed::Host, false},
  };
  Table table({"case", "device", "epoch", "last epoch's loss", "check"});
  for (const Case& c : cases) {
    if (c.on_gpu && !ctx.gpu()) {
      ctx.skip("train " + c.name, ctx.no_gpu_reason());
      continue;
    }
    const Device d = c.on_gpu ? ctx.device : cpu();
    random::seed(0);
    auto model = mlp_model({c.units, c.units}, c.dropout ? 0.5 : 0.0, d);
    std::unique_ptr<optim::Optimizer> opt;
    if (c.adam)
      opt = std::make_unique<optim::Adam>(model->parameters(),
                                          optim::AdamOptions{.lr = c.lr, .capturable = c.feed == Feed::Graph});
    else
      opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = c.lr, .momentum = c.momentum});
    const EpochResult r = epochs(c.name, data, *model, *opt, d, c.feed, count);
    const std::string check = std::isfinite(r.loss) ? "ok" : fmt::format("the loss is {}", r.loss);
    ctx.record("train", c.name, "seconds", "s", r.seconds, false, check);
    table.row({c.name, d.str(), format_seconds(r.seconds), format_number(r.loss, 4), check});
  }
  table.print();
  verdict(ctx.gpu() ? "compare with bench/peers/torch_bench.py --workloads train (scripts/compare joins the records)"
                    : "CPU cases only (no GPU): compare with PyTorch's CPU figures from bench/peers/torch_bench.py");
}

}  // namespace kiln_cli
