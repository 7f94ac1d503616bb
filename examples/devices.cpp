// Walkthrough 1: which devices exist, their properties, and falling back to the CPU.
//
//   build/cpu/examples/example_devices      (or build/cuda/... on a GPU machine)
//
// The same program runs everywhere: try_gpu() is the CPU when there is no GPU, so code
// written for cuda:0 still runs (slowly) on a laptop. Exits non-zero when a check fails.
#include <kiln/kiln.hpp>

#include <cstdio>
#include <iostream>
#include <string>

using namespace kiln;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "CHECK FAILED: " << what << "\n";
    ++failures;
  }
}

void print_properties(Device d) {
  DeviceProperties p = device_properties(d);
  std::printf("  %-7s %s\n", d.str().c_str(), p.name.c_str());
  if (d.is_cuda()) {
    std::printf("          compute capability %d.%d, %d SMs, warp %d\n", p.major, p.minor, p.multiprocessors,
                p.warp_size);
    std::printf("          memory %.1f GiB (%.1f GiB free), L2 %.1f MiB, %.0f GB/s theoretical\n",
                p.total_memory / 1073741824.0, p.free_memory / 1073741824.0, p.l2_cache_bytes / 1048576.0,
                p.memory_bandwidth_gbs);
    check(p.total_memory > 0 && p.free_memory <= p.total_memory, d.str() + ": free <= total memory");
    check(p.multiprocessors > 0 && p.major > 0, d.str() + ": SMs and compute capability");
  } else {
    std::printf("          %d hardware threads\n", p.multiprocessors);
    check(p.multiprocessors > 0, "cpu: at least one hardware thread");
  }
  check(!p.name.empty(), d.str() + ": a name");
}

}  // namespace

int main() {
  const int n = num_gpus();
  std::printf("num_gpus()     = %d\n", n);
  const Device d = try_gpu();  // cuda:0, or cpu when there is no GPU
  std::printf("try_gpu()      = %s\n", d.str().c_str());
  std::printf("try_gpu(%d)     = %s   (a GPU that does not exist falls back to the CPU)\n", n, try_gpu(n).str().c_str());
  std::vector<Device> all = try_all_gpus();
  std::printf("try_all_gpus() = {");
  for (size_t i = 0; i < all.size(); ++i) std::printf("%s%s", i ? ", " : "", all[i].str().c_str());
  std::printf("}\n");

  check(try_gpu(n) == cpu(), "try_gpu(num_gpus()) is the CPU");
  if (n == 0) {
    check(d == cpu(), "without a GPU, try_gpu() is the CPU");
    check(all.size() == 1 && all[0] == cpu(), "without a GPU, try_all_gpus() is {cpu}");
  } else {
    check(d == gpu(0), "try_gpu() is cuda:0");
    check(static_cast<int>(all.size()) == n, "try_all_gpus() lists every GPU");
    for (int i = 0; i < n && i < static_cast<int>(all.size()); ++i) check(all[i] == gpu(i), "try_all_gpus()[i] is gpu(i)");
  }

  // gpu(i) does not fall back: asking for a GPU that is not there is an error that says so.
  try {
    (void)gpu(n);
    check(false, "gpu(num_gpus()) throws DeviceError");
  } catch (const DeviceError& e) {
    std::printf("gpu(%d) throws DeviceError: %s\n", n, e.what());
  }
  check(parse_device("cuda:1") == Device{DeviceType::CUDA, 1}, "parse_device(\"cuda:1\")");
  check(parse_device("cpu") == cpu(), "parse_device(\"cpu\")");

  std::printf("device properties:\n");
  print_properties(cpu());
  for (int i = 0; i < n; ++i) print_properties(gpu(i));

  // A DeviceGuard makes a device current for a scope: creation functions without a device use it.
  {
    DeviceGuard guard(d);
    Array a = arange(1, 7, 1, float32).reshape({2, 3});
    check(a.device() == d, "arrays made inside DeviceGuard(d) live on d");
    // Operations run where their operands live; item() copies the result to the host.
    float total = (a * 2.0f).sum().item<float>();
    std::printf("on %s: (arange(1, 7) * 2).sum() = %g\n", a.device().str().c_str(), total);
    check(total == 42.0f, "sum of 2, 4, ..., 12 is 42");
  }
  check(current_device() == cpu(), "the guard restores the CPU as current device");

  if (failures) {
    std::fprintf(stderr, "example_devices: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("example_devices: all checks passed\n");
  return 0;
}
