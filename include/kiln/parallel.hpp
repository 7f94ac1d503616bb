// Parallel loops on the threads kiln's CPU kernels use (as at::parallel_for), sized by OpenMP's thread count
// (OMP_NUM_THREADS, omp_set_num_threads): OpenMP's team, the one oneDNN and OpenBLAS's OpenMP build run on, or
// kiln's own pool when the linked OpenBLAS keeps threads of its own (its pthreads build; KILN_CPU_POOL=openmp or
// =kiln overrides the choice). Threads claim ranges from a shared counter, the caller's too.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

/// Calls fn(begin, end) over [0, n) split into contiguous ranges, one per pool thread when n >= 2 * grain (at
/// most n / grain ranges), else once on the calling thread. Returns when every range is done and rethrows the
/// first exception a range threw. Inside a parallel loop it runs serially.
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn, int64_t grain = 32768);

}  // namespace kiln
