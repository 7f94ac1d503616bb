// The CPU backend's parallel loops: chunks claimed from an atomic counter by the threads of
// an OpenMP team, the team oneDNN and OpenBLAS use too (see parallel.hpp for why).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

#include "cpu/parallel.hpp"
#include "kiln/parallel.hpp"

namespace kiln::cpu_impl {

namespace {

struct Job {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
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
  }
  t_in_parallel = false;
}

}  // namespace

int max_threads() { return t_in_parallel ? 1 : omp_get_max_threads(); }

bool in_parallel() { return t_in_parallel; }

void parallel_chunks(int64_t chunks, const std::function<void(int64_t)>& fn) {
  if (chunks <= 1 || t_in_parallel) {
    for (int64_t c = 0; c < chunks; ++c) fn(c);
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
