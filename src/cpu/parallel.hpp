// Parallel loops for the CPU backend: OpenMP above a size threshold so small
// arrays stay cheap (a parallel region costs microseconds).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace kiln::cpu_impl {

/// Elements below which kernels stay on the calling thread.
inline constexpr int64_t kParallelThreshold = 1 << 15;

/// Calls fn(begin, end) over [0, n) split in contiguous ranges, one per thread when
/// n * cost_per_element is large enough, else once on the calling thread.
template <class F>
void parallel_for(int64_t n, F&& fn, int64_t grain = kParallelThreshold) {
  int threads = omp_get_max_threads();
  if (n < 2 * grain || threads <= 1 || omp_in_parallel()) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, n / grain);
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    fn(begin, end);
  }
}

}  // namespace kiln::cpu_impl
