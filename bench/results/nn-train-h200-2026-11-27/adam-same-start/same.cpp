// kiln trained from PyTorch's initial weights and batch order (peers_nn.py's Adam model, seed 0).
#include <cstdio>
#include "kiln/kiln.hpp"
using namespace kiln;
int main(int argc, char** argv) {
  const Device d = argc > 1 ? parse_device(argv[1]) : cpu();
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 1000), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1000, 1000),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1000, 10)});
  nn::StateDict sd;
  for (const char* k : {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"})
    sd.insert(k, load(std::string("/tmp/same/") + k + ".npy"));
  model->load_state_dict(sd);
  model->to(d);
  optim::Adam opt(model->parameters(), {});
  data::Dataset tr = data::fashion_mnist(true, "/usr/share/datasets/fashion-mnist");
  data::Dataset te = data::fashion_mnist(false, "/usr/share/datasets/fashion-mnist");
  Array x = tr.images.to(d), y = tr.labels.to(d), xt = te.images.to(d), yt = te.labels.to(d);
  Array perms = load("/tmp/same/perms.npy").to(d);
  for (int e = 0; e < 5; ++e) {
    for (int64_t i = 0; i < 60000; i += 100) {
      Array idx = perms.slice(0, e, e + 1).reshape({60000}).slice(0, i, i + 100);
      opt.zero_grad();
      nn::cross_entropy((*model)(take(x, idx, 0)), take(y, idx, 0)).backward();
      opt.step();
    }
    NoGradGuard ng;
    model->eval();
    const double acc = mean((argmax((*model)(xt), 1) == yt).astype(float64)).item<double>();
    model->train();
    std::printf("epoch %d test acc %.4f\n", e + 1, acc);
  }
}
