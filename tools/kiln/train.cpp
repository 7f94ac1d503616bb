// `kiln train mlp`: the Chainer MNIST walkthrough's MLP (784-units-units-10, ReLU, dropout 0.5) trained on
// Fashion-MNIST with kiln's nn, optim, data and train layers, on the best device present.
#include "train.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kiln/dist.hpp"
#include "kiln/kiln.hpp"
#include "kiln/train.hpp"
#include "launch.hpp"

namespace kiln_cli {

using namespace kiln;

std::shared_ptr<nn::Sequential> mlp_model(const std::vector<int64_t>& hidden, double dropout, Device device) {
  auto model = std::make_shared<nn::Sequential>();
  int64_t width = 784;
  for (int64_t h : hidden) {
    model->push_back(std::make_shared<nn::Linear>(width, h, true, float32, device));
    model->push_back(std::make_shared<nn::ReLU>());
    if (dropout > 0) model->push_back(std::make_shared<nn::Dropout>(dropout));
    width = h;
  }
  model->push_back(std::make_shared<nn::Linear>(width, 10, true, float32, device));
  return model;
}

std::optional<int> start_ranks(const TrainArgs& a, bool launched) {
  if (!a.resume.empty() && (a.nproc > 1 || launched))
    throw ValueError(
        "kiln train: --resume trains one process; leave out --nproc (data-parallel checkpoints are "
        "not written by kiln train)");
  if (a.compile && (a.nproc > 1 || launched))
    throw ValueError("kiln train: --compile replays one process's step, not the gradient all-reduces of --nproc; "
                     "use --graph (a CUDA graph captures them) or leave out --compile");
  if (a.save_every > 0 && a.resume.empty())
    throw ValueError("kiln train: --save-every N saves the run's state to the --resume file; give --resume PATH");
  if (a.nproc <= 1 || launched) return std::nullopt;
  // Start the ranks: the same command line under kiln launch (each rank sees RANK and trains its share).
  LaunchArgs l;
  l.nproc = a.nproc;
  l.command = a.argv;
  l.command.front() = std::filesystem::read_symlink("/proc/self/exe").string();  // this kiln, by its real path
  return launch(l);
}

Device join_ranks(const TrainArgs& a, bool launched) {
  const Device device = a.device.empty() ? try_gpu() : parse_device(a.device);
  if (!launched) return device;
  dist::InitOptions init;
  if (device.is_cpu() || num_gpus() < dist::launch_environment().world_size) init.device = cpu();
  dist::init_process_group(init);
  return dist::default_group().device();
}

int train_mlp(const TrainArgs& a) {
  const bool launched = dist::launch_environment().world_size > 1;
  if (auto status = start_ranks(a, launched)) return *status;
  const Device device = join_ranks(a, launched);
  const bool chatty = dist::rank() == 0;
  random::seed(a.seed);
  const data::Dataset train_set = data::fashion_mnist(true, a.data);
  const data::Dataset test_set = data::fashion_mnist(false, a.data);
  const std::vector<int64_t> hidden = a.hidden.empty() ? std::vector<int64_t>{a.units, a.units} : a.hidden;
  std::shared_ptr<nn::Sequential> model;
  std::string widths = "784";
  if (a.model == "cnn") {
    model = std::make_shared<nn::Sequential>();
    // Two 3x3 convolutions with batch norm, ReLU and 2x2 max pooling (28 -> 14 -> 7), then 128 hidden units.
    using P = std::pair<int64_t, int64_t>;
    model->push_back(std::make_shared<nn::Unflatten>(1, Shape{1, 28, 28}));
    int64_t channels = 1;
    for (int64_t out : {32, 64}) {
      model->push_back(
          std::make_shared<nn::Conv2d>(channels, out, P{3, 3}, nn::Conv2dOptions{.padding = {1, 1}}, float32, device));
      model->push_back(std::make_shared<nn::BatchNorm2d>(out, 1e-5, 0.1, true, float32, device));
      model->push_back(std::make_shared<nn::ReLU>());
      model->push_back(std::make_shared<nn::MaxPool2d>(P{2, 2}));
      channels = out;
    }
    model->push_back(std::make_shared<nn::Flatten>());
    model->push_back(std::make_shared<nn::Linear>(64 * 7 * 7, 128, true, float32, device));
    model->push_back(std::make_shared<nn::ReLU>());
    if (a.dropout > 0) model->push_back(std::make_shared<nn::Dropout>(a.dropout));
    model->push_back(std::make_shared<nn::Linear>(128, 10, true, float32, device));
    widths = "conv3x3(32)-bn-relu-pool-conv3x3(64)-bn-relu-pool-128";
  } else {
    model = mlp_model(hidden, a.dropout, device);
    for (int64_t h : hidden) widths += fmt::format("-{}", h);
  }
  std::unique_ptr<optim::Optimizer> opt;
  double lr = 0;
  if (a.optimizer == "adam") {
    lr = a.lr.value_or(optim::AdamOptions{}.lr);
    opt = std::make_unique<optim::Adam>(model->parameters(),
                                        optim::AdamOptions{.lr = lr, .capturable = a.graph || a.compile});
  } else if (a.optimizer == "sgd") {
    lr = a.lr.value_or(optim::SGDOptions{}.lr);
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = lr, .momentum = a.momentum});
  } else {
    throw ValueError("kiln train: --optimizer must be sgd or adam, got " + a.optimizer);
  }
  std::shared_ptr<nn::Module> trained = model;
  if (launched) trained = std::make_shared<dist::DistributedDataParallel>(model);
  data::DataLoaderOptions loader{.batch_size = a.batch, .shuffle = !launched, .seed = a.seed, .device = device};
  if (launched)
    loader.sampler = data::DistributedSampler{.num_replicas = dist::world_size(), .rank = dist::rank(), .seed = a.seed};
  data::DataLoader train_loader(train_set.images, train_set.labels, loader);
  data::DataLoader test_loader(test_set.images, test_set.labels, {.batch_size = 1000, .device = device});
  if (chatty)
    fmt::print(
        "kiln train {} on {}{}: {}-10, dropout {}, {} (lr {}{}), batch {}{}, {} epochs{}, {} training / {} test "
        "images\n",
        a.model, device.str(), launched ? fmt::format(" and {} more rank(s)", dist::world_size() - 1) : "", widths,
        a.dropout, a.optimizer, lr,
        a.optimizer == "sgd" && a.momentum > 0 ? fmt::format(", momentum {}", a.momentum) : "", a.batch,
        launched ? " per rank (DistributedDataParallel)" : "", a.epochs,
        a.graph && device.is_cuda() ? ", each step replayed from a CUDA graph"
        : a.compile                 ? ", each step replayed by kiln::compile"
                                    : "",
        train_set.labels.size(),
        test_set.labels.size());
  if (!a.resume.empty() && std::filesystem::exists(a.resume) && chatty) fmt::print("resuming from {}\n", a.resume);
  // Under data parallel every rank evaluates the whole test set (the models are identical); rank 0 reports.
  const std::vector<train::EpochMetrics> history = train::fit(*trained, *opt, train_loader, &test_loader,
                                                              {.epochs = a.epochs,
                                                               .log_path = chatty ? a.log : std::string(),
                                                               .progress = chatty,
                                                               .graph = a.graph,
                                                               .compile = a.compile,
                                                               .max_grad_norm = a.max_grad_norm,
                                                               .checkpoint = a.resume,
                                                               .checkpoint_every = a.save_every,
                                                               .resume = !a.resume.empty()});
  if (!chatty) {
    dist::destroy_process_group();
    return 0;
  }
  std::vector<double> seconds;
  for (const auto& m : history) seconds.push_back(m.seconds);
  std::sort(seconds.begin(), seconds.end());
  if (history.empty())
    fmt::print("nothing left to train: {} holds the end of all {} epochs\n", a.resume, a.epochs);
  else
    fmt::print("test accuracy {:.4f} after {} epochs; median epoch {:.3f} s\n", history.back().test_accuracy,
               history.size(), seconds[seconds.size() / 2]);
  if (!a.checkpoint.empty()) {
    nn::save_safetensors(a.checkpoint, model->state_dict(), {{"model", a.model}});
    fmt::print("wrote {}\n", a.checkpoint);
  }
  if (launched) dist::destroy_process_group();
  return 0;
}

std::vector<int64_t> parse_widths(const std::string& text) {
  std::vector<int64_t> widths;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t used = 0;
    int64_t w = 0;
    try {
      w = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || w <= 0)
      throw ValueError("kiln train: --hidden takes positive widths separated by commas (100,100), got \"" + text +
                       "\"");
    widths.push_back(w);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return widths;
}

}  // namespace kiln_cli
