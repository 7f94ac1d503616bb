// Parallel loops on kiln's CPU thread pool (as at::parallel_for): the pool the CPU kernels use, sized by
// OpenMP's thread count (OMP_NUM_THREADS, omp_set_num_threads). The caller works too and claims ranges from a
// shared counter, so a descheduled worker never stalls the loop (no OpenMP team barrier).
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

/// Calls fn(begin, end) over [0, n) split into contiguous ranges, one per pool thread when n >= 2 * grain (at
/// most n / grain ranges), else once on the calling thread. Returns when every range is done and rethrows the
/// first exception a range threw. Inside a parallel loop it runs serially.
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn, int64_t grain = 32768);

}  // namespace kiln
