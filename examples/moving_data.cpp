// Walkthrough 3: moving data on purpose.
//
//   build/cuda/examples/example_moving_data
//
// - a.to(dev) copies; a.to(a.device()) is `a` itself (same storage, no copy).
// - An operation on arrays of two devices throws DeviceError naming both and the fix:
//   kiln never copies behind your back.
// - Reading a GPU array (printing, item, to_vector) waits for the work that produces it
//   and copies it to the host: that cost is real, and visible below.
#include <kiln/kiln.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

using namespace kiln;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "CHECK FAILED: " << what << "\n";
    ++failures;
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  Array a = arange(0, 6, 1, float32).reshape({2, 3});
  Array same = a.to(cpu());
  std::printf("a.to(cpu()) on a CPU array shares its storage: %s\n", same.shares_storage(a) ? "yes" : "no");
  check(same.shares_storage(a), "to(same device) returns the same storage");

  if (num_gpus() == 0) {
    std::printf("no GPU: skipping the transfers, the mixed-device error and the cost of reading a GPU array\n");
    return failures ? 1 : 0;
  }
  const Device d = gpu(0);

  // An explicit copy to the GPU: new storage there, same values.
  Array g = a.to(d);
  std::printf("g = a.to(%s): device %s, shares a's storage: %s\n", d.str().c_str(), g.device().str().c_str(),
              g.shares_storage(a) ? "yes" : "no");
  check(g.device() == d && !g.shares_storage(a), "to(gpu) makes a copy on the GPU");
  check(g.to_vector<float>() == a.to_vector<float>(), "the copy holds the same values");
  check(g.to(d).shares_storage(g), "g.to(g.device()) is g itself");

  // Mixing devices is an error, never a silent copy.
  try {
    (void)(a + g);
    check(false, "cpu + cuda:0 throws DeviceError");
  } catch (const DeviceError& e) {
    std::string msg = e.what();
    std::printf("a + g throws DeviceError:\n  %s\n", msg.c_str());
    check(msg.find("cpu") != std::string::npos && msg.find(d.str()) != std::string::npos,
          "the message names both devices");
  }
  // The fix: move one operand deliberately.
  Array sum = a.to(d) + g;
  std::vector<float> got = sum.to_vector<float>();
  check(got == std::vector<float>({0, 2, 4, 6, 8, 10}), "a.to(g.device()) + g == 2 * a");
  std::printf("a.to(g.device()) + g = %s\n", sum.str().c_str());

  // Reading a GPU array waits for the work that makes it, then copies it to the host.
  const int64_t n = 4096;
  Array x = random::normal({n, n}, float32, d);
  synchronize(d);
  auto t0 = std::chrono::steady_clock::now();
  Array y = matmul(x, x);  // queued: returns before the GPU is done
  double launch_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  std::string text = y.str();  // waits for the matmul, copies, formats (summarised: 4096^2 > 1000 elements)
  double first_print_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  Array host = y.to(cpu());  // 64 MiB over PCIe/NVLink-C2C, synchronous
  double copy_s = seconds_since(t0);
  std::printf("matmul launch returned after %.3f ms; printing y then took %.3f ms (waits for the matmul);\n"
              "copying y (%lld MiB) to the host took %.3f ms\n",
              launch_s * 1e3, first_print_s * 1e3, static_cast<long long>(y.nbytes() >> 20), copy_s * 1e3);
  check(text.find("device='" + d.str() + "'") != std::string::npos, "a printed GPU array says where it lives");
  check(host.device() == cpu() && host.shape() == y.shape(), "y.to(cpu()) is a host array of y's shape");
  // The host copy holds y's values: compare one element with a float64 dot product of the inputs.
  Array xr = x.index({0}).to(cpu()).astype(float64), xc = x.index({Slice(), 0}).to(cpu()).astype(float64);
  double want = (xr * xc).sum().item<double>();
  double have = host.index({0, 0}).item<float>();
  check(std::abs(have - want) <= 1e-4 * (1 + std::abs(want)), "y[0, 0] matches a float64 dot product");

  if (failures) {
    std::fprintf(stderr, "example_moving_data: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("example_moving_data: all checks passed\n");
  return 0;
}
