// Parallel loops for the CPU backend: a small work-claiming thread pool, used
// above a size threshold so small arrays stay cheap.
//
// Why not `#pragma omp parallel for`: an OpenMP team ends in a barrier that waits
// for every thread, so on a busy machine (2 cores, a compiler running) one
// descheduled thread stalls the whole op for a scheduler time slice (~8 ms for a
// 60 us sum). Here the caller works too and claims chunks from an atomic counter;
// a worker that wakes late finds nothing left, and the caller only waits for
// chunks that running workers have already claimed. The thread count follows
// OpenMP's setting (OMP_NUM_THREADS, omp_set_num_threads), which OpenBLAS shares.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

namespace kiln::cpu_impl {

/// Elements below which kernels stay on the calling thread.
inline constexpr int64_t kParallelThreshold = 1 << 15;

/// Threads a parallel loop may use now (OpenMP's max threads; 1 inside a parallel loop).
int max_threads();
/// True on a thread that is running a chunk of a parallel loop.
bool in_parallel();
/// Runs fn(c) for every c in [0, chunks), spread over the pool; returns when all are done.
/// Rethrows the first exception a chunk threw.
void parallel_chunks(int64_t chunks, const std::function<void(int64_t)>& fn);

/// Calls fn(begin, end) over [0, n) split in contiguous ranges, one per thread when n is at
/// least 2 * grain, else once on the calling thread.
template <class F>
void parallel_for(int64_t n, F&& fn, int64_t grain = kParallelThreshold) {
  int threads = max_threads();
  if (n < 2 * grain || threads <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, n / grain);
  parallel_chunks(chunks, [&](int64_t c) { fn(n * c / chunks, n * (c + 1) / chunks); });
}

}  // namespace kiln::cpu_impl
