// Parallel loops for the CPU backend: chunks of work claimed from an atomic counter by a
// team of threads, used above a size threshold so small arrays stay cheap.
//
// Which team: the one whose threads are spinning from the last heavy library call. oneDNN
// (convolutions) and OpenBLAS's OpenMP build run on OpenMP's team, whose threads keep
// spinning for a while after each call; a pool of kiln's own then competed with them for
// the cores (16 cores, a batch-16 ResNet-50 forward: 0.45 s, 0.24 s with
// OMP_WAIT_POLICY=PASSIVE). On one team, the threads that just ran a convolution run the
// next ReLU. OpenBLAS's pthreads build spins threads of its own, and an OpenMP region ends
// only when every thread of its team has, so a team thread kept off its core stalls the op
// for a time slice (the 784-1000-1000-10 Adam MLP's CPU epoch on 16 cores: 24 s on OpenMP's
// team, 4.5 s on kiln's pool): after a product on those threads loops run on kiln's pool,
// whose caller works too and whose late workers find nothing left to claim.
// KILN_CPU_POOL=openmp or =kiln fixes the choice. The thread count is OpenMP's
// (OMP_NUM_THREADS, omp_set_num_threads), which OpenBLAS shares.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>

namespace kiln::cpu_impl {

/// Elements below which kernels stay on the calling thread.
inline constexpr int64_t kParallelThreshold = 1 << 15;

/// Whether loops run on OpenMP's team now (else kiln's pool).
bool on_openmp_team();
/// Tests: 1 runs later loops on OpenMP's team, 0 on kiln's pool, -1 chooses again as at start-up.
void set_team_for_testing(int team);
/// Library calls that leave threads spinning: a product on OpenBLAS (its own threads with the pthreads
/// build), a oneDNN primitive (OpenMP's team).
void note_blas_call();
void note_openmp_library_call();
/// A product that keep_openmp_team_hot() ran on one thread: loops stay on OpenMP's team, and the next product
/// is not kept to one thread again (only the first product after an OpenMP library call is).
void note_kept_product();
/// True when loops follow the last library call (OpenBLAS's pthreads build) and that call ran on OpenMP's team
/// (oneDNN): a small product then runs on one OpenBLAS thread (matmul.cpp), since waking OpenBLAS's own threads
/// would leave them spinning beside OpenMP's team, which the next convolution needs.
bool keep_openmp_team_hot();

/// Threads a parallel loop may use now (OpenMP's max threads; 1 inside a parallel loop). Turns OpenMP's dynamic
/// adjustment (OMP_DYNAMIC) off for the calling thread first, as parallel_chunks does: see fixed_openmp_team.
int max_threads();
/// Turns OpenMP's dynamic team sizes off for the calling thread: OpenBLAS's OpenMP build hangs
/// when a region gets fewer threads than it asked for.
void fixed_openmp_team();
/// Whether other processes keep the calling thread off its core (measured over windows of 50 ms; see
/// thread_pool.cpp): its parallel loops then run their chunks on it alone.
bool contended();
/// A calling thread's load watch (contended()): the current window and whether its loops run on it alone.
struct LoadWatch {
  int64_t window_start = 0, wait_at_start = -1;
  /// The machine's busy seconds and this process's CPU seconds at the ends of the last windows (busy < 0: none).
  struct Sample {
    int64_t at = 0;
    double busy = -1, own = 0;
  };
  static constexpr int kOthersWindows = 4;
  Sample samples[kOthersWindows];
  int64_t next = 0;  // the next sample's slot (modulo kOthersWindows); the oldest one's
  bool contended = false;
  int64_t hold_until = 0;   // contended at least until then
  int64_t hold = 0;         // how long the next contended spell holds at least
  int64_t released_at = 0;  // when the last one ended
};
/// One window's verdict (contended() after each 50 ms): the thread waited for a core `wait_share` of the window
/// while other processes used `others_cores` cores' worth of time (negative: unknown). Updates and returns
/// w.contended; `now` in nanoseconds.
bool load_window(LoadWatch& w, int64_t now, double wait_share, double others_cores);
/// The load watch's policy: "all", "follow" or "ignore" as KILN_CPU_LOAD says, or "auto" (the default) where it is
/// on (float32_products_keep_bits), else "ignore".
const std::string& load_policy();
/// Whether a product runs on one BLAS thread now: contended() under KILN_CPU_LOAD=all (the product's bits may
/// change with it), or a float32 product under `auto` (where that keeps its bits).
bool contended_products(bool float32);
/// Tests: 1 or 0 fixes contended()'s answer, -1 measures whatever KILN_CPU_LOAD says, -2 goes back to what it says.
void set_contended_for_testing(int contended);
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
