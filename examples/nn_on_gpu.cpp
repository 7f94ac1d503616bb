// d2l's "neural networks and GPUs": a Sequential(Linear(3, 1)) moved to try_gpu(), its parameters living
// there, read and written; one training step on the same device; the gradient checked by hand.
#include <cmath>
#include <cstdio>
#include <memory>

#include "kiln/kiln.hpp"

using namespace kiln;

int main() {
  const Device device = try_gpu();
  random::seed(0);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(3, 1));
  net->to(device);
  std::printf("device: %s\n", device.str().c_str());
  for (const auto& [name, p] : net->named_parameters())
    std::printf("%s on %s, shape %s\n", name.c_str(), p.device().str().c_str(), shape_str(p.shape()).c_str());

  // Write the parameters (unrecorded) and read the output on the device.
  auto& linear = static_cast<nn::Linear&>((*net)[0]);
  {
    NoGradGuard no_grad;
    linear.weight().assign(from_data({1.0f, -2.0f, 0.5f}, {1, 3}, device));
    linear.bias().fill(0.25);
  }
  const Array x = from_data({1.0f, 2.0f, 3.0f, 0.0f, 1.0f, -1.0f}, {2, 3}, device);
  const Array y = (*net)(x);  // (1 - 4 + 1.5 + 0.25, 0 - 2 - 0.5 + 0.25) = (-1.25, -2.25)
  const auto values = y.to_vector<float>();
  std::printf("net(X) = [%g, %g] on %s\n", values[0], values[1], y.device().str().c_str());
  if (values[0] != -1.25f || values[1] != -2.25f) return 1;

  // One step of SGD on the mean squared error against 0: dL/dw = mean over rows of 2 y x.
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  const Array loss = nn::mse_loss(y, zeros_like(y));
  loss.backward();
  const auto g = linear.weight().grad().to_vector<float>();
  const float want[3] = {(2 * -1.25f * 1 + 2 * -2.25f * 0) / 2, (2 * -1.25f * 2 + 2 * -2.25f * 1) / 2,
                         (2 * -1.25f * 3 + 2 * -2.25f * -1) / 2};
  for (int i = 0; i < 3; ++i)
    if (std::abs(g[i] - want[i]) > 1e-6f) return 1;
  opt.step();
  const auto w = linear.weight().to_vector<float>();
  std::printf("after one step: w = [%g, %g, %g] (gradient [%g, %g, %g]), loss %.4f\n", w[0], w[1], w[2], g[0], g[1],
              g[2], loss.item<float>());
  for (int i = 0; i < 3; ++i)
    if (std::abs(w[i] - ((i == 0 ? 1.0f : i == 1 ? -2.0f : 0.5f) - 0.1f * want[i])) > 1e-6f) return 1;
  std::printf("ok\n");
  return 0;
}
