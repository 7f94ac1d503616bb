// The CPU backend's parallel loops: chunks claimed from an atomic counter by the threads of
// an OpenMP team (the team oneDNN and an OpenMP OpenBLAS use too), or of kiln's own pool after
// a product on OpenBLAS's own threads (see parallel.hpp for why).
#include <fcntl.h>
#include <time.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
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

/// kiln's own threads. A job offers as many seats as it has chunks beyond the caller's first and wakes every
/// sleeping worker with one broadcast; those that find no seat left sleep again, so a loop of two chunks has one
/// worker join it, not all of them. One broadcast rather than one notify per seat (each a system call the caller
/// makes before starting its own chunk): the notifies made CPU training slower on many cores
/// (bench/results/session28-h200-2026-11-29.md).
class Pool {
 public:
  explicit Pool(int workers) : workers_(workers) {
    for (int i = 0; i < workers; ++i) std::thread([this] { loop(); }).detach();
  }

  void run(int64_t chunks, const std::function<void(int64_t)>& fn) {
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->chunks = chunks;
    const int wake = static_cast<int>(std::min<int64_t>(chunks - 1, workers_));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_ = job;
      seats_ = wake;  // a worker still finishing the last job takes a seat when it comes back to wait
    }
    cv_.notify_all();
    work_on(*job);
    // Only chunks already claimed by running workers remain: wait for those.
    while (job->done.load(std::memory_order_acquire) < chunks) std::this_thread::yield();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (current_ == job) {
        current_.reset();
        seats_ = 0;
      }
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return seats_ > 0; });
        --seats_;
        job = current_;
      }
      if (job) work_on(*job);
    }
  }

  const int workers_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int seats_ = 0;  // workers the current job still wants woken
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

namespace {

/// The calling thread's time waiting for a core while runnable (ns), from the kernel's scheduler statistics
/// (/proc/thread-self/schedstat: time on a core, time runnable but waiting, time slices); -1 when unreadable.
/// The file stays open: pread at offset 0 makes the kernel write the figures again.
int64_t runnable_wait_ns() {
  struct File {  // closed when the thread ends: programs may start many short-lived threads
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    ~File() {
      if (fd >= 0) close(fd);
    }
  };
  thread_local File file;
  const int fd = file.fd;
  if (fd < 0) return -1;
  char text[96];
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  unsigned long long on_cpu = 0, waiting = 0;
  if (std::sscanf(text, "%llu %llu", &on_cpu, &waiting) != 2) return -1;
  return static_cast<int64_t>(waiting);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The machine's busy time over all cores (seconds: /proc/stat's first line, user, nice, system, irq, softirq and
/// steal, in clock ticks), -1 when unreadable. The file stays open, as in runnable_wait_ns.
double machine_busy_seconds() {
  struct File {
    int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    ~File() {
      if (fd >= 0) close(fd);
    }
  };
  thread_local File file;
  static const double tick = 1.0 / static_cast<double>(std::max(1L, sysconf(_SC_CLK_TCK)));
  if (file.fd < 0) return -1;
  char text[256];
  const ssize_t n = pread(file.fd, text, sizeof text - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (std::sscanf(text, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle, &iowait, &irq,
                  &softirq, &steal) != 8)
    return -1;
  return static_cast<double>(user + nice + system + irq + softirq + steal) * tick;
}

/// CPU time of this process, all its threads (seconds).
double process_cpu_seconds() {
  timespec t{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

thread_local LoadWatch t_load;

// The window over which the wait is measured.
constexpr int64_t kWindowNs = 50'000'000;

}  // namespace

/// KILN_CPU_LOAD: auto (the default), follow (loops), all (loops and products), ignore (neither). auto watches the
/// load where float32 products keep their bits on any thread count (float32_products_keep_bits: all of them on
/// oneMKL in its strict mode, on two threads or fewer): loops then run on the contended thread alone and float32
/// products on one thread, so that results do not depend on the load (float64 products keep their thread count:
/// oneMKL's strict mode did not keep their bits); elsewhere auto is `ignore`: on an idle 16-core machine the calling
/// thread also waits for a core behind kiln's own OpenMP and BLAS threads
/// (bench/results/graph-random-attention-h100-2026-11-27.md: `follow` made the Adam MLP epoch 2.6 times longer
/// there, before the watch asked whether other processes were busy at all; not measured there since).
const std::string& load_policy() {
  static const std::string policy = [] {
    const std::string set = detail::env_choice("KILN_CPU_LOAD", {"auto", "follow", "all", "ignore"}, "auto");
    if (set != "auto") return set;
    return std::string(float32_products_keep_bits() ? "auto" : "ignore");
  }();
  return policy;
}

namespace {

/// -2: as KILN_CPU_LOAD says (not chosen yet), -1: measure, 0 or 1: the answer (set by KILN_CPU_LOAD=ignore or a test).
std::atomic<int> g_contended_override{-2};

}  // namespace

/// With more runnable threads than cores, a parallel region waits for its slowest thread, and a thread kept
/// off its core by another process holds the region for a time slice: a small MLP's epoch on 2 cores, each busy
/// with another process, took 15 times its idle time. The wait shows in the calling thread's scheduler
/// statistics (the time it was runnable but had no core). While it exceeds a fifth of the last window, the
/// thread is contended and its loops run their chunks on it alone; a spell ends once the wait falls below a
/// twentieth. The chunks stay those of the full thread count, so results keep their bits. Products keep
/// their BLAS thread count: OpenBLAS's results change in their last bits with it (a 100x784x100 product on one
/// thread and on two differ), and a resumed run must repeat the uninterrupted one bit for bit; with
/// KILN_CPU_LOAD=all they run on one thread too (much faster under load, results then depend on the load), and
/// under `auto` float32 products do where that keeps their bits (load_policy).
/// The wait alone cannot tell kiln's own threads (OpenMP's team, OpenBLAS's, the pool) from another process's:
/// a spell starts only while other processes also used at least half a core over the last 200 ms (the machine's
/// busy time less this process's CPU time), and ends when they use less than a quarter.
bool contended() {
  int forced = g_contended_override.load(std::memory_order_relaxed);
  if (forced == -2) {
    forced = load_policy() == "ignore" ? 0 : -1;
    g_contended_override.store(forced, std::memory_order_relaxed);
  }
  if (forced >= 0) return forced == 1;
  LoadWatch& w = t_load;
  const int64_t now = now_ns();
  if (now - w.window_start < kWindowNs) return w.contended;
  const int64_t wait = runnable_wait_ns();
  if (wait < 0) return false;
  const double busy = machine_busy_seconds(), own = process_cpu_seconds();
  const bool first = w.wait_at_start < 0;
  const double share = static_cast<double>(wait - w.wait_at_start) / static_cast<double>(now - w.window_start);
  // Other processes' use over the last windows together (up to LoadWatch::kOthersWindows): the machine's busy
  // time moves in clock ticks per core, this process's time continuously, so one window alone reads noisy.
  constexpr int kRing = LoadWatch::kOthersWindows;
  const LoadWatch::Sample& oldest = w.samples[w.next < kRing ? 0 : w.next % kRing];
  const bool have = busy >= 0 && oldest.busy >= 0;
  const double others = !have ? -1
                              : ((busy - oldest.busy) - (own - oldest.own)) /
                                    (1e-9 * static_cast<double>(now - oldest.at));
  w.samples[w.next++ % kRing] = {now, busy, own};
  w.window_start = now;
  w.wait_at_start = wait;
  if (first) return false;
  return load_window(w, now, share, others);
}

bool load_window(LoadWatch& w, int64_t now, double wait_share, double others_cores) {
  // The shares of a window spent waiting for a core that start and end a contended spell, and the cores' worth
  // of other processes' work that must be there to start one (unknown, negative: not asked); a spell's least
  // length, doubled (up to the maximum) when it follows the last within a second: with one competing process
  // in all, a window on one thread looks idle and one on two threads waits.
  constexpr double kBusyShare = 0.2, kCalmShare = 0.05, kOthersBusy = 0.5, kOthersCalm = 0.25;
  constexpr int64_t kMinHoldNs = 250'000'000, kMaxHoldNs = 4'000'000'000, kFlapNs = 1'000'000'000;
  const bool others_known = others_cores >= 0;
  if (!w.contended && wait_share > kBusyShare && (!others_known || others_cores >= kOthersBusy)) {
    w.contended = true;
    w.hold = now - w.released_at < kFlapNs ? std::min(2 * std::max(w.hold, kMinHoldNs), kMaxHoldNs) : kMinHoldNs;
    w.hold_until = now + w.hold;
  } else if (w.contended && (wait_share < kCalmShare || (others_known && others_cores < kOthersCalm)) &&
             now >= w.hold_until) {
    w.contended = false;
    w.released_at = now;
  }
  return w.contended;
}

bool contended_products(bool float32) {
  // Read at every product: the policy's two answers once, not two string comparisons each time.
  static const bool all = load_policy() == "all", float32_only = load_policy() == "auto";
  return (all || (float32_only && float32)) && contended();
}

void set_contended_for_testing(int contended) {
  g_contended_override.store(std::max(contended, -2), std::memory_order_relaxed);
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
  if (contended()) {  // the same chunks, on the calling thread alone: no peer to wait for, the same bits
    Job job;
    job.fn = &fn;
    job.chunks = chunks;
    work_on(job);
    if (job.error) std::rethrow_exception(job.error);
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
