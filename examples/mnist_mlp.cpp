// Chainer's MNIST walkthrough on Fashion-MNIST: an MLP 784-100-100-10, SGD, batch 100; each mini-batch copied
// to the device by the DataLoader, zero_grad, backward, update. Trains 1 epoch (pass a number for more) and
// checks that the test accuracy beats 0.6 (under AddressSanitizer: 3 epochs on the first 6000 images, to stay
// quick; the same with KILN_EXAMPLE_QUICK=1). Needs
// Debian's dataset-fashion-mnist (make demo installs it; or $KILN_FASHION_MNIST names a folder with the files): without it the example says so and exits 0.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "kiln/kiln.hpp"

using namespace kiln;

int main(int argc, char** argv) {
#ifdef __SANITIZE_ADDRESS__
  const bool quick = true;
#else
  const bool quick = std::getenv("KILN_EXAMPLE_QUICK") != nullptr;
#endif
  const int64_t epochs = argc > 1 ? std::atoll(argv[1]) : quick ? 3 : 1;
  const char* env = std::getenv("KILN_FASHION_MNIST");  // another folder with the files, e.g. a carried copy
  const std::string dir = env && *env ? env : data::kFashionMnistDir;
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    std::printf("skipped: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)\n", dir.c_str());
    return 0;
  }
  const Device device = try_gpu();
  random::seed(0);
  data::Dataset train_set = data::fashion_mnist(true, dir);
  const data::Dataset test_set = data::fashion_mnist(false, dir);
  if (quick) train_set = {train_set.images.slice(0, 0, 6000), train_set.labels.slice(0, 0, 6000)};
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(784, 100));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(100, 100));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(100, 10));
  model->to(device);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  data::DataLoader train(train_set.images, train_set.labels, {.batch_size = 100, .shuffle = true, .device = device});
  data::DataLoader test(test_set.images, test_set.labels, {.batch_size = 1000, .device = device});
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    Array total = zeros({}, float64, device);  // the epoch's loss stays on the device
    for (const data::Batch& b : train) {
      const Array loss = nn::cross_entropy((*model)(b.x), b.y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      total = total + loss.detach().astype(float64);
    }
    const auto [test_loss, test_accuracy] = train::evaluate(*model, test);
    std::printf("epoch %lld on %s: train loss %.4f, test loss %.4f, test accuracy %.4f\n",
                static_cast<long long>(epoch), device.str().c_str(), total.item<double>() / train.num_batches(),
                test_loss, test_accuracy);
    if (epoch == epochs && test_accuracy < 0.6) return 1;
  }
  std::printf("ok\n");
  return 0;
}
