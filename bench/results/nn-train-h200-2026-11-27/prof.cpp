#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <xmmintrin.h>
#include <pmmintrin.h>
#include "kiln/kiln.hpp"
using namespace kiln;
using C = std::chrono::steady_clock;
int main(int argc, char** argv) {
  const bool real = argc > 1 && std::strcmp(argv[1], "real") == 0;
  const bool ts_mode = argc > 2 && std::strcmp(argv[2], "ts") == 0;
  if (std::getenv("FTZ")) {
#pragma omp parallel
    { _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON); _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON); }
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON); _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  }
  random::seed(0);
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 1000), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1000, 1000),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1000, 10)});
  optim::Adam opt(model->parameters(), {});
  Array x = random::uniform({60000, 784}, 0.0, 1.0, float32, cpu());
  Array y = random::randint(0, 10, {60000}, int64, cpu());
  if (real) { auto d = data::fashion_mnist(true, std::getenv("FMNIST")); x = d.images; y = d.labels; }
  train::TrainStep trainstep(*model, opt, {.accuracy = false});
  Array perm = random::permutation(60000);
  double tf = 0, tb = 0, ts = 0, tg = 0;
  auto ms = [](C::time_point a) { return std::chrono::duration<double, std::milli>(C::now() - a).count(); };
  for (int ep = 0; ep < 3; ++ep) {
  tf = tb = ts = tg = 0;
  for (int64_t i = 0; i < 60000; i += 100) {
    auto t = C::now();
    Array idx = perm.slice(0, i, i + 100);
    Array xb = take(x, idx, 0), yb = take(y, idx, 0);
    tg += ms(t); t = C::now();
    if (ts_mode) { trainstep(xb, yb); tf += ms(t); continue; }
    opt.zero_grad();
    Array loss = nn::cross_entropy((*model)(xb), yb);
    tf += ms(t); t = C::now();
    loss.backward();
    tb += ms(t); t = C::now();
    opt.step();
    ts += ms(t);
  }
  std::printf("epoch %d: ", ep);
  std::printf("kiln epoch: gather %.0f ms, forward %.0f, backward %.0f, step %.0f, total %.0f\n", tg, tf, tb, ts, tg + tf + tb + ts);
  }
}
