// The CPU backend's parallel loops: chunks claimed from an atomic counter by the threads of
// an OpenMP team (the team oneDNN and an OpenMP OpenBLAS use too), or of kiln's own pool after
// a product on OpenBLAS's own threads (see parallel.hpp for why).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/env.hpp"
#include "cpu/matmul.hpp"
#include "cpu/parallel.hpp"
#include "kiln/error.hpp"
#include "kiln/parallel.hpp"

namespace kiln::cpu_impl {

namespace {

struct Job {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex error_mutex;
  std::exception_ptr error;
};

thread_local bool t_in_parallel = false;

void work_on(Job& job) {
  t_in_parallel = true;
  for (int64_t c; (c = job.next.fetch_add(1, std::memory_order_relaxed)) < job.chunks;) {
    try {
      (*job.fn)(c);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
    }
    job.done.fetch_add(1, std::memory_order_acq_rel);
  }
  t_in_parallel = false;
}

class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) std::thread([this] { loop(); }).detach();
  }
  int workers() const { return workers_; }

  void run(int64_t chunks, const std::function<void(int64_t)>& fn) {
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->chunks = chunks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_ = job;
      ++generation_;
    }
    cv_.notify_all();
    work_on(*job);
    // Only chunks already claimed by running workers remain: wait for those.
    while (job->done.load(std::memory_order_acquire) < chunks) std::this_thread::yield();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (current_ == job) current_.reset();
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        job = current_;
      }
      if (job) work_on(*job);
    }
  }

  int workers_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  std::shared_ptr<Job> current_;
};

Pool& pool() {
  static Pool* p = new Pool(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1));
  return *p;
}

/// 1: OpenMP's team, 0: kiln's pool, 2: whichever ran the last heavy library call, -1: not chosen yet.
std::atomic<int> g_team{-1};
/// The last heavy library call: none yet, a product on OpenBLAS's own threads, or an OpenMP library's call.
/// kKeptCall: a small product ran on one OpenBLAS thread right after an OpenMP library call (keep_openmp_team_hot):
/// loops stay on OpenMP's team, but the next product may wake OpenBLAS's threads again, so that a run of products
/// with no convolution between them (an MLP's step) does not stay on one thread for good.
enum LastCall : int { kNoCall, kBlasCall, kOpenmpCall, kKeptCall };
std::atomic<int> g_last{kNoCall};

void note_last_call(LastCall call) {
  if (g_last.load(std::memory_order_relaxed) != call) g_last.store(call, std::memory_order_relaxed);
}

}  // namespace

/// KILN_CPU_POOL=openmp or =kiln overrides the choice (for measuring one against the other).
bool on_openmp_team() {
  int v = g_team.load(std::memory_order_relaxed);
  if (v < 0) {
    const std::string pool = detail::env_choice("KILN_CPU_POOL", {"openmp", "kiln"}, "");
    v = pool == "openmp" ? 1 : pool == "kiln" ? 0 : blas_has_own_threads() ? 2 : 1;
    g_team.store(v, std::memory_order_relaxed);
  }
  return v == 2 ? g_last.load(std::memory_order_relaxed) != kBlasCall : v == 1;
}

void set_team_for_testing(int team) { g_team.store(team, std::memory_order_relaxed); }

void note_blas_call() { note_last_call(kBlasCall); }

void note_openmp_library_call() { note_last_call(kOpenmpCall); }

void note_kept_product() { note_last_call(kKeptCall); }

bool keep_openmp_team_hot() {
  (void)on_openmp_team();  // chooses the mode on first use
  return g_team.load(std::memory_order_relaxed) == 2 && g_last.load(std::memory_order_relaxed) == kOpenmpCall;
}

/// OMP_DYNAMIC=true lets OpenMP hand a parallel region fewer threads than it asked for; OpenBLAS's OpenMP build
/// then waits forever for the threads it planned with (its threaded gemm hangs). Every thread that runs kiln's
/// loops or calls a library from them therefore turns it off for itself (dyn-var is per thread; reading it is a
/// field of the thread's OpenMP state, so it is checked on every call: a program may turn it on at any time).
void fixed_openmp_team() {
  if (omp_get_dynamic()) omp_set_dynamic(0);
}

int max_threads() {
  if (t_in_parallel) return 1;
  fixed_openmp_team();
  return omp_get_max_threads();
}

bool in_parallel() { return t_in_parallel; }

void parallel_chunks(int64_t chunks, const std::function<void(int64_t)>& fn) {
  fixed_openmp_team();
  if (chunks <= 1 || t_in_parallel) {
    for (int64_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  if (!on_openmp_team()) {
    pool().run(chunks, fn);
    return;
  }
  Job job;
  job.fn = &fn;
  job.chunks = chunks;
  const int team = static_cast<int>(std::min<int64_t>(chunks, omp_get_max_threads()));
  // Every thread of the team claims chunks until none is left; a thread that starts late finds none.
#pragma omp parallel num_threads(team)
  work_on(job);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace kiln::cpu_impl

namespace kiln {

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  cpu_impl::parallel_for(n, fn, std::max<int64_t>(grain, 1));
}

}  // namespace kiln
