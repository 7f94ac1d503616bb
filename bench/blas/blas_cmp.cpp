// sgemm GFLOP/s of a BLAS loaded with dlopen (its cblas_sgemm), row-major NN, best of 3 after a warm-up.
#include <dlfcn.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) { std::printf("dlopen %s: %s\n", argv[1], dlerror()); return 1; }
  auto sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(h, "bli_thread_set_num_threads")); set && argc > 3) set(std::atoi(argv[3]));
  for (int n : {4096, 8192}) {
    std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
    for (size_t i = 0; i < a.size(); ++i) { a[i] = float((i * 7) % 13) * 0.1f; b[i] = float((i * 5) % 11) * 0.1f; }
    auto run = [&] { sgemm(101, 111, 111, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n); };
    run();
    double best = 1e9;
    for (int i = 0; i < (n > 8192 ? 2 : 3); ++i) {
      auto t = std::chrono::steady_clock::now(); run();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    double check = 0; for (int k = 0; k < n; ++k) check += double(a[k]) * b[size_t(k) * n];
    std::printf("%-14s n=%5d %6.0f GFLOP/s  (c[0] %.6g vs %.6g)\n", argv[2], n, 2.0 * n * n * n / best / 1e9, c[0], check);
  }
}
