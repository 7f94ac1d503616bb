// Helpers shared by the GPU test files: a kernel that keeps a stream busy for a known time.
#pragma once
#ifdef KILN_WITH_CUDA

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda/compiler.hpp"
#include "cuda/launch.hpp"
#include "cuda/runtime.hpp"
#include "kiln/kiln.hpp"

namespace kiln_test {

/// One thread spins until `ns` nanoseconds of the GPU's global timer have passed.
inline const char* const kSpinSource = R"(
extern "C" __global__ void kiln_spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
)";

/// Queues the spin kernel on `stream` (the legacy default stream when its handle is null): the
/// stream stays busy for `seconds` of GPU time, independent of the GPU's speed.
inline void spin(const kiln::Stream& stream, double seconds) {
  const int index = stream.device().index;
  // Loaded once per process and GPU, then launched with no cache lookup (the bench tests time it).
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<kiln::cuda_impl::Module>> modules;
  std::shared_ptr<kiln::cuda_impl::Module> module;
  {
    std::lock_guard lock(mutex);
    auto& m = modules[index];
    if (!m) m = kiln::cuda_impl::load_module(kSpinSource, "kiln_spin.cu", index);
    module = m;
  }
  kiln::cuda_impl::set_device(index);
  auto ns = static_cast<unsigned long long>(seconds * 1e9);
  void* args[] = {&ns};
  kiln::cuda_impl::launch(module->function("kiln_spin"), dim3(1), dim3(1), 0,
                          static_cast<cudaStream_t>(stream.handle()), args, "kiln_spin");
}

/// Queues the spin kernel on the current stream of `device`.
inline void spin(kiln::Device device, double seconds) { spin(kiln::Stream::current(device), seconds); }

}  // namespace kiln_test

#endif  // KILN_WITH_CUDA
