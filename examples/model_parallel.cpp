// Model parallel, as Chainer's walkthrough closes: the MNIST MLP (784-100-100-10) with its first layer on one
// device and the rest on another, the activations and their gradients crossing through the differentiable
// to(device) copies (peer copies between two GPUs). The same model on one device, from the same initial values
// and the same batches, gives the same losses within float tolerance; the example checks that and exits 1
// otherwise. Devices: cuda:0 and cuda:1 with two GPUs; cpu and cuda:0 with one; cpu and cpu without a GPU.
// Trains 300 steps of batch 100 with SGD on Fashion-MNIST (60 under AddressSanitizer or KILN_EXAMPLE_QUICK=1);
// without the data set it says so and exits 0.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "kiln/kiln.hpp"

using namespace kiln;

namespace {

std::shared_ptr<nn::Sequential> layers(std::vector<std::shared_ptr<nn::Module>> m) {
  return std::make_shared<nn::Sequential>(std::move(m));
}

}  // namespace

int main() {
#ifdef __SANITIZE_ADDRESS__
  const bool quick = true;
#else
  const bool quick = std::getenv("KILN_EXAMPLE_QUICK") != nullptr;
#endif
  const char* env = std::getenv("KILN_FASHION_MNIST");
  const std::string dir = env && *env ? env : data::kFashionMnistDir;
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    std::printf("skipped: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)\n", dir.c_str());
    return 0;
  }
  const Device first_device = num_gpus() >= 2 ? gpu(0) : cpu();
  const Device second_device = num_gpus() >= 2 ? gpu(1) : try_gpu();
  const Device single_device = first_device;
  const data::Dataset train_set = data::fashion_mnist(true, dir);

  // The split model: layer 1 on the first device, layers 2-3 on the second.
  random::seed(0);
  auto head = layers({std::make_shared<nn::Linear>(784, 100), std::make_shared<nn::ReLU>()});
  auto tail = layers(
      {std::make_shared<nn::Linear>(100, 100), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(100, 10)});
  head->to(first_device);
  tail->to(second_device);
  // The same model, the same initial values (the same draws), on one device.
  random::seed(0);
  auto whole = layers({std::make_shared<nn::Linear>(784, 100), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(100, 100), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(100, 10)});
  whole->to(single_device);

  std::vector<Array> split_params = head->parameters();
  for (const Array& p : tail->parameters()) split_params.push_back(p);
  optim::SGD split_opt(split_params, {.lr = 0.1});
  optim::SGD whole_opt(whole->parameters(), {.lr = 0.1});
  data::DataLoader loader(train_set.images, train_set.labels, {.batch_size = 100, .shuffle = true, .seed = 1});

  const int steps = quick ? 60 : 300;
  std::printf("model parallel: layer 1 on %s, layers 2-3 on %s; reference on %s; %d steps of batch 100\n",
              first_device.str().c_str(), second_device.str().c_str(), single_device.str().c_str(), steps);
  double worst = 0.0;
  int step = 0;
  while (step < steps) {
    for (const data::Batch& b : loader) {
      if (step == steps) break;
      split_opt.zero_grad();
      whole_opt.zero_grad();
      // Forward across the devices: to() is differentiable, so backward carries the gradient back.
      Array split_loss =
          nn::cross_entropy((*tail)((*head)(b.x.to(first_device)).to(second_device)), b.y.to(second_device));
      Array whole_loss = nn::cross_entropy((*whole)(b.x.to(single_device)), b.y.to(single_device));
      split_loss.backward();
      whole_loss.backward();
      split_opt.step();
      whole_opt.step();
      if (step % 50 == 0 || step == steps - 1) {
        const double a = split_loss.item<double>(), c = whole_loss.item<double>();
        worst = std::max(worst, std::abs(a - c) / std::max(1e-12, std::abs(c)));
        std::printf("  step %3d: loss split %.6f, one device %.6f\n", step, a, c);
      }
      ++step;
    }
  }
  // Float32 on two devices may round differently (different GEMM kernels), and the difference grows with training.
  const double tolerance = 1e-3;
  std::printf("largest relative loss difference %.2e (tolerance %.0e): %s\n", worst, tolerance,
              worst <= tolerance ? "the split model trains as the single one" : "MISMATCH");
  return worst <= tolerance ? 0 : 1;
}
