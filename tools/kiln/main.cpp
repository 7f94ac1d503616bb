// The `kiln` command: `kiln info` lists devices and the build; `kiln demo` shows
// the library at work on the best device present.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <chrono>
#include <iostream>

#include "kiln/kiln.hpp"

namespace {

int info() {
  fmt::print("{}\n", kiln::build_info());
  fmt::print("devices: ");
  for (const auto& d : kiln::try_all_gpus()) fmt::print("{} ", d.str());
  fmt::print("(GPUs: {})\n", kiln::num_gpus());
  return 0;
}

int demo() {
  using namespace kiln;
  Device d = try_gpu();
  fmt::print("== kiln demo on {}\n", d.str());
  random::seed(0);
  Array x = arange(0, 6, 1, float32, d).reshape({2, 3});
  std::cout << "x = " << x << "\n";
  std::cout << "x * 2 + 1 = " << (x * 2 + 1) << "\n";
  std::cout << "exp(x).sum(axis=1) = " << exp(x).sum(1) << "\n";
  std::cout << "x.T() @ x = " << matmul(x.T(), x) << "\n";
  Array r = random::normal({4}, 0.0, 1.0, float32, d);
  std::cout << "random::normal({4}) = " << r << "\n";

  // A CPU matmul, timed honestly: warm-up first, then the median of several runs
  // (the CPU runs synchronously, so a host clock is right here).
  const int64_t n = 1024;
  Array a = random::uniform({n, n}, float32, cpu());
  Array b = random::uniform({n, n}, float32, cpu());
  (void)matmul(a, b);
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Array c = matmul(a, b);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  double t = times[times.size() / 2];
  fmt::print("cpu matmul {}x{} float32: median {:.2f} ms over 5 runs = {:.1f} GFLOP/s\n", n, n, t * 1e3,
             2.0 * n * n * n / t / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: arrays on CPUs and NVIDIA GPUs"};
  app.require_subcommand(1);
  auto* info_cmd = app.add_subcommand("info", "devices, memory and build features");
  auto* demo_cmd = app.add_subcommand("demo", "a short tour on the best device present");
  CLI11_PARSE(app, argc, argv);
  try {
    if (info_cmd->parsed()) return info();
    if (demo_cmd->parsed()) return demo();
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
