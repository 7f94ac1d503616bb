// Dumps kiln's loss, gradients and weights after N Adam steps from PyTorch's init and batch order.
#include <cstdio>
#include <cstdlib>
#include "kiln/kiln.hpp"
using namespace kiln;
int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 1;
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 1000), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1000, 1000),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1000, 10)});
  nn::StateDict sd;
  const char* keys[] = {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"};
  for (const char* k : keys) sd.insert(k, load(std::string("/tmp/same0/") + k + ".npy"));
  model->load_state_dict(sd);
  optim::Adam opt(model->parameters(), {});
  data::Dataset tr = data::fashion_mnist(true, "/usr/share/datasets/fashion-mnist");
  Array perms = load("/tmp/same0/perms.npy");
  for (int s = 0; s < steps; ++s) {
    Array idx = perms.slice(0, 0, 1).reshape({60000}).slice(0, s * 100, s * 100 + 100);
    opt.zero_grad();
    Array loss = nn::cross_entropy((*model)(take(tr.images, idx, 0)), take(tr.labels, idx, 0));
    loss.backward();
    if (s == 0) {
      std::printf("loss %.9f\n", loss.item<float>());
      auto ps = model->named_parameters();
      for (auto& [n, p] : ps) save("/tmp/same0/kgrad_" + n + ".npy", p.grad());
    }
    opt.step();
  }
  for (auto& [n, p] : model->named_parameters()) save("/tmp/same0/kw_" + n + ".npy", p);
}
