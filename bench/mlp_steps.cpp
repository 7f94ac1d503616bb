// mlp_steps {loop,trainstep,compiled} WARMUP STEPS: bench/python_mlp_steps.py's training steps from C++ (the same
// data, batches, model, optimizer and calls), for counting instructions per step under callgrind beside the Python
// driver's (its docstring gives the protocol). `compiled` runs the loop's step through kiln::compile (traced, then
// replayed). Prints the mode, the mean loss of all the steps run (the same for loop and compiled; the Python
// driver's on one thread) and the mean wall time of the steps after WARMUP.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/train.hpp"

using namespace kiln;

int main(int argc, char** argv) {
  const std::string mode = argc == 4 ? argv[1] : "";
  if (mode != "loop" && mode != "trainstep" && mode != "compiled") {
    std::fprintf(stderr, "usage: mlp_steps {loop,trainstep,compiled} WARMUP STEPS\n");
    return 2;
  }
  const int64_t warmup = std::atoll(argv[2]), steps = warmup + std::atoll(argv[3]), n = 2000, batch = 100;
  const Device d = cpu();
  random::seed(0);
  const Array x = random::uniform({n, 784}, 0.0, 1.0, float32, d);
  const Array y = random::randint(0, 10, {n}, int64, d);
  random::seed(0);
  nn::Sequential model(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 100), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.5),
      std::make_shared<nn::Linear>(100, 100), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.5),
      std::make_shared<nn::Linear>(100, 10)});
  optim::SGD optimizer(model.parameters(), {.lr = 0.01});
  model.train();
  const Array perm = remainder(arange(n) * 7919, n);
  Array total = zeros({}, float32, d);
  train::TrainStep step(model, optimizer, {.accuracy = false});
  auto loop_step = [&](const std::vector<Array>& in) {
    optimizer.zero_grad();
    const Array loss = nn::cross_entropy(model(in[0]), in[1]);
    loss.backward();
    optimizer.step();
    return std::vector<Array>{loss.detach()};
  };
  CompiledStep compiled = compile(loop_step);
  auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    if (s == warmup) start = std::chrono::steady_clock::now();
    const int64_t i = s % (n / batch) * batch;
    const Array idx = perm.slice(0, i, i + batch);
    const Array xb = take(x, idx, 0), yb = take(y, idx, 0);
    if (mode == "trainstep")
      step(xb, yb);
    else
      total += (mode == "compiled" ? compiled({xb, yb}) : loop_step({xb, yb}))[0];
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mean = mode == "trainstep" ? step.mean_loss() : total.item<double>() / static_cast<double>(steps);
  std::printf("%s %.6f %.1f us/step\n", mode.c_str(), mean, 1e6 * seconds / static_cast<double>(steps - warmup));
  return 0;
}
