// Steady over time: thousands of training steps (forward, backward, optimizer) leave host memory (the process's
// resident set) and, on a GPU, the caching allocator's reserved bytes where they were after the first steps.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <vector>

#ifdef KILN_WITH_CUDA
#include "kiln/cuda.hpp"
#endif
#include "kiln/kiln.hpp"

using namespace kiln;

namespace {

/// The resident set of this process in bytes (/proc/self/statm), or -1 where it cannot be read.
int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long size = 0, resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return got == 2 ? static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE) : -1;
}

/// The GPU caching allocator's reserved bytes (0 for the CPU, or in a build without CUDA).
size_t gpu_reserved(const Device& d) {
#ifdef KILN_WITH_CUDA
  if (d.is_cuda()) return cuda::memory_stats(d).reserved;
#endif
  (void)d;
  return 0;
}

/// Trains a 64-128-10 MLP with Adam on fixed random batches for `steps` steps on `device`.
void train_steps(nn::Module& model, optim::Optimizer& opt, const Array& x, const Array& y, int steps) {
  for (int s = 0; s < steps; ++s) {
    Array loss = nn::cross_entropy(model(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

}  // namespace

// gcc defines __SANITIZE_ADDRESS__ under AddressSanitizer; clang 14 (the fuzz preset) only answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define KILN_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_UNDER_ASAN 1
#endif
#endif

TEST(Soak, ThousandsOfTrainingStepsDoNotGrowHostOrGpuMemory) {
#if defined(KILN_TEST_UNDER_ASAN)
  // AddressSanitizer keeps freed memory in its quarantine (up to 256 MiB), so the resident set grows by design.
  GTEST_SKIP() << "AddressSanitizer's quarantine keeps freed blocks resident; the cpu and cuda presets run this";
#endif
  std::vector<Device> devices{cpu()};
  if (num_gpus() > 0) devices.push_back(gpu(0));
  for (const Device& d : devices) {
    SCOPED_TRACE(d.str());
    random::seed(3);
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(64, 128));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(128, 10));
    model->to(d);
    optim::Adam opt(model->parameters(), {.lr = 1e-3});
    const Array x = random::normal({32, 64}, 0.0, 1.0, float32, d);
    const Array y = random::randint(0, 10, {32}, int64, d);
    train_steps(*model, opt, x, y, 200);  // warm: caches, kernels, pools
    if (d.is_cuda()) synchronize(d);
    const int64_t host_before = resident_bytes();
    const size_t gpu_before = gpu_reserved(d);
    train_steps(*model, opt, x, y, 5000);
    if (d.is_cuda()) synchronize(d);
    const int64_t host_after = resident_bytes();
    ASSERT_GT(host_before, 0);
    // A leak of one small array per step would be 5000 x (at least 512 bytes): 2.5 MB and more.
    EXPECT_LT(host_after - host_before, int64_t{1} << 20) << "resident set grew from " << host_before << " to "
                                                          << host_after << " bytes";
    EXPECT_EQ(gpu_reserved(d), gpu_before);
    // And it learned: the loss on its own training batch went down from ln(10).
    EXPECT_LT(nn::cross_entropy((*model)(x), y).item<float>(), 0.5f);
  }
}
