// kiln::parallel_for on both of the CPU's thread teams (OpenMP's and kiln's own pool) and on a contended calling
// thread alone: every index once, the first exception rethrown, nested loops serial, and the CPU kernels that run
// on it giving the same bits.
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu/matmul.hpp"
#include "cpu/parallel.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;

namespace {

/// Runs the test body on OpenMP's team, then on kiln's pool, then on the calling thread alone (as on a machine
/// whose cores other processes hold), then lets the process choose again.
template <class F>
void on_both_teams(F body) {
  for (int mode : {1, 0, 2}) {
    cpu_impl::set_team_for_testing(mode == 2 ? 1 : mode);
    cpu_impl::set_contended_for_testing(mode == 2 ? 1 : 0);
    SCOPED_TRACE(mode == 1 ? "OpenMP team" : mode == 0 ? "kiln's pool" : "contended: the calling thread");
    body();
  }
  cpu_impl::set_team_for_testing(-1);
  cpu_impl::set_contended_for_testing(-2);
}

}  // namespace

TEST(ParallelFor, CoversEveryIndexOnceOnBothTeams) {
  on_both_teams([] {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> ranges{0};
      parallel_for(
          n,
          [&](int64_t b, int64_t e) {
            ++ranges;
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          },
          1024);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " i " << i;
      if (n >= 2 * 1024 && omp_get_max_threads() > 1) {
        EXPECT_GT(ranges.load(), 1) << n;
      }
    }
  });
}

TEST(ParallelFor, RethrowsAndRunsNestedLoopsSerially) {
  on_both_teams([] {
    EXPECT_THROW(parallel_for(
                     1 << 16,
                     [](int64_t b, int64_t) {
                       if (b == 0) throw std::runtime_error("range 0");
                     },
                     1024),
                 std::runtime_error);
    std::atomic<int64_t> total{0};
    parallel_for(
        1 << 14,
        [&](int64_t b, int64_t e) {
          EXPECT_TRUE(cpu_impl::in_parallel());
          parallel_for(
              e - b, [&](int64_t ib, int64_t ie) { total += ie - ib; }, 1);  // one range: serial
        },
        1024);
    EXPECT_EQ(total.load(), 1 << 14);
    EXPECT_FALSE(cpu_impl::in_parallel());
  });
}

// kiln's pool wakes one worker per chunk beyond the caller's, not all of them: each of these loops needs its second
// chunk taken by a worker while the caller waits inside the first, so a wake that went missing (a worker still
// finishing the last loop when the next one starts) would show as a timed-out round.
TEST(ParallelFor, KilnsPoolWakesAWorkerForEveryLoop) {
  if (std::thread::hardware_concurrency() < 2 || omp_get_max_threads() < 2)
    GTEST_SKIP() << "one core or one thread: kiln's pool has no worker";
  struct Restore {
    ~Restore() {
      cpu_impl::set_team_for_testing(-1);
      cpu_impl::set_contended_for_testing(-2);
    }
  } restore;
  cpu_impl::set_team_for_testing(0);
  cpu_impl::set_contended_for_testing(0);
  for (int round = 0; round < 2000; ++round) {
    std::atomic<int> started{0};
    std::atomic<bool> timed_out{false};
    cpu_impl::parallel_chunks(2, [&](int64_t) {
      ++started;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (started.load() < 2) {
        if (std::chrono::steady_clock::now() > deadline) {
          timed_out = true;
          return;
        }
        std::this_thread::yield();
      }
    });
    ASSERT_FALSE(timed_out.load()) << "round " << round << ": no worker took the second chunk within 20 s";
  }
}

TEST(ParallelFor, KernelsGiveTheSameBitsOnBothTeams) {
  random::seed(3);
  const Array x = random::normal({257, 1031}, 0.0, 1.0, float32, cpu());
  std::vector<Array> got;
  on_both_teams([&] {
    got.push_back(stack({exp(x) * 2.0f, sum(x, {1}).reshape({257, 1}).broadcast_to({257, 1031})}));
  });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(array_equal(got[0], got[1]));
  EXPECT_TRUE(array_equal(got[0], got[2])) << "a contended thread keeps the bits";
}

// With OpenBLAS's pthreads build, loops follow the last heavy library call: kiln's pool after a product on
// OpenBLAS's own threads, OpenMP's team after a oneDNN convolution (mode 2, forced here: this machine's BLAS may
// be the OpenMP build, which always uses the team). Right after a oneDNN call a product below 2^28 multiply-adds
// runs on one BLAS thread and leaves OpenMP's team in charge; a larger one wakes OpenBLAS's threads.
TEST(ParallelFor, FollowsTheTeamOfTheLastLibraryCall) {
  cpu_impl::set_contended_for_testing(0);  // a busy machine would keep products on one thread
  cpu_impl::set_team_for_testing(2);
  cpu_impl::set_mkl_min_work_for_testing(int64_t{1} << 27);  // the split of larger teams: small products on OpenBLAS
  cpu_impl::note_blas_call();
  EXPECT_FALSE(cpu_impl::on_openmp_team());
  EXPECT_FALSE(cpu_impl::keep_openmp_team_hot());
  cpu_impl::note_openmp_library_call();
  EXPECT_TRUE(cpu_impl::on_openmp_team());
  EXPECT_TRUE(cpu_impl::keep_openmp_team_hot());
  const Array a = random::normal({300, 300}, 0.0, 1.0, float32, cpu());
  const Array small = matmul(a, a);  // 2.7e7 multiply-adds: one thread, the team stays
  EXPECT_TRUE(cpu_impl::on_openmp_team());
  EXPECT_FALSE(cpu_impl::keep_openmp_team_hot()) << "only the first product after an OpenMP call is kept";
  EXPECT_TRUE(allclose(small, matmul(a.astype(float64), a.astype(float64)).astype(float32), 1e-4, 1e-4));
  (void)matmul(a, a);  // the next product: OpenBLAS's threads (where there are several), then kiln's pool
  if (omp_get_max_threads() > 1) {
    EXPECT_FALSE(cpu_impl::on_openmp_team());
  }
  cpu_impl::note_openmp_library_call();
  const Array b = random::normal({700, 700}, 0.0, 1.0, float32, cpu());
  (void)matmul(b, b);  // 3.4e8 multiply-adds: OpenBLAS's threads, then kiln's pool (with oneMKL: OpenMP's team)
  if (build_info().find("onemkl") != std::string::npos) {
    EXPECT_TRUE(cpu_impl::on_openmp_team()) << "oneMKL runs large products on OpenMP's team";
    EXPECT_TRUE(cpu_impl::keep_openmp_team_hot());
  } else {
    EXPECT_FALSE(cpu_impl::on_openmp_team());
    EXPECT_FALSE(cpu_impl::keep_openmp_team_hot());
    (void)matmul(a, a);  // after a product on OpenBLAS's threads a small one uses them too
    EXPECT_FALSE(cpu_impl::on_openmp_team());
  }
  (void)nn::conv2d(random::normal({1, 2, 9, 9}, 0.0, 1.0, float32, cpu()),
                   random::normal({3, 2, 3, 3}, 0.0, 1.0, float32, cpu()));
#ifdef KILN_HAVE_ONEDNN
  EXPECT_TRUE(cpu_impl::on_openmp_team());
#endif
  cpu_impl::set_team_for_testing(-1);
  cpu_impl::set_contended_for_testing(-2);
  cpu_impl::set_mkl_min_work_for_testing(-1);
}

// Which products go to oneMKL by default (KILN_MKL_MIN_WORK unset): none without oneMKL; beside OpenBLAS's pthreads
// build only those of 2^34 multiply-adds and more (its threads fought MKL's team: a GPT-2 d6 step 7x slower on 16
// cores with the usual split); every one on a team of at most two threads; those of 2^27 and more otherwise.
TEST(ParallelFor, OneMklTakesTheProductsItsSplitSays) {
  if (std::getenv("KILN_MKL_MIN_WORK") != nullptr) GTEST_SKIP() << "KILN_MKL_MIN_WORK sets the split";
  cpu_impl::set_mkl_min_work_for_testing(-1);
  const int64_t split = cpu_impl::mkl_min_work();
  if (build_info().find("onemkl") == std::string::npos) {
    EXPECT_EQ(split, std::numeric_limits<int64_t>::max());
  } else if (cpu_impl::blas_has_own_threads()) {
    EXPECT_EQ(split, int64_t{1} << 34);
  } else {
    EXPECT_EQ(split, omp_get_max_threads() <= 2 ? 0 : int64_t{1} << 27);
  }
  cpu_impl::set_mkl_min_work_for_testing(12345);
  EXPECT_EQ(cpu_impl::mkl_min_work(), build_info().find("onemkl") == std::string::npos
                                          ? std::numeric_limits<int64_t>::max() : 12345);
  cpu_impl::set_mkl_min_work_for_testing(-1);
}

// A contended thread (other processes hold the cores) runs every chunk of its loops itself, and the chunks are
// those of the full thread count (so the results keep their bits: KernelsGiveTheSameBitsOnBothTeams).
TEST(ParallelFor, AContendedThreadRunsTheSameChunksItself) {
  auto count_ranges = [](std::vector<std::thread::id>* ids) {
    std::atomic<int> ranges{0};
    std::mutex mutex;
    parallel_for(
        int64_t{1} << 20,
        [&](int64_t, int64_t) {
          ++ranges;
          std::lock_guard<std::mutex> lock(mutex);
          ids->push_back(std::this_thread::get_id());
        },
        1024);
    return ranges.load();
  };
  std::vector<std::thread::id> calm_ids, contended_ids;
  cpu_impl::set_contended_for_testing(0);
  const int calm = count_ranges(&calm_ids);
  cpu_impl::set_contended_for_testing(1);
  const int contended = count_ranges(&contended_ids);
  cpu_impl::set_contended_for_testing(-2);
  EXPECT_EQ(contended, calm);
  EXPECT_EQ(calm, std::min(omp_get_max_threads(), 1024));
  for (const std::thread::id& id : contended_ids) EXPECT_EQ(id, std::this_thread::get_id());
}

// Processes spinning on every core (three per core) keep the calling thread, busy itself, waiting for a core most
// of the time while they use the machine: within a few windows of 50 ms it reads as contended. Whether an idle
// machine reads as calm is not asserted: the machine running the tests may be busy.
TEST(ParallelFor, ProcessesHoldingEveryCoreMakeTheCallerContended) {
  cpu_impl::set_contended_for_testing(-1);  // measure, whatever KILN_CPU_LOAD says
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<pid_t> spinners;
  for (unsigned i = 0; i < 3 * cores; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {  // the child spins until killed (at most a minute, should the test die first)
      alarm(60);
      std::atomic<unsigned long> spins{0};
      for (;;) spins.fetch_add(1, std::memory_order_relaxed);
    }
    if (pid > 0) spinners.push_back(pid);
  }
  bool seen = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  volatile double sink = 0;
  while (!seen && std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 10000; ++i) sink = sink + 1.0;
    seen = cpu_impl::contended();
  }
  for (const pid_t pid : spinners) kill(pid, SIGKILL);
  for (const pid_t pid : spinners) waitpid(pid, nullptr, 0);
  cpu_impl::set_contended_for_testing(-2);
  ASSERT_EQ(spinners.size(), 3 * cores) << "fork failed";
  EXPECT_TRUE(seen) << "not contended within 10 s with " << 3 * cores << " spinning processes on " << cores
                    << " cores";
}

// One window's verdict: a thread that waits for a core while no other process is busy waits behind its own
// process's threads (kiln's OpenMP, BLAS and pool threads on a machine with many cores), and stays calm; with
// other processes busy it is contended, for at least a spell's least length (0.25 s), and calm again once they
// stop or the wait ends. Without the machine's figures (others unknown) the wait decides alone.
TEST(ParallelFor, TheLoadWatchCountsOnlyOtherProcessesLoad) {
  constexpr int64_t ms = 1'000'000;
  cpu_impl::LoadWatch w;
  int64_t t = 10'000 * ms;
  EXPECT_FALSE(cpu_impl::load_window(w, t, 0.9, 0.0)) << "kiln's own threads alone";
  EXPECT_FALSE(cpu_impl::load_window(w, t += 50 * ms, 0.9, 0.3)) << "less than half a core of other work";
  EXPECT_TRUE(cpu_impl::load_window(w, t += 50 * ms, 0.3, 1.5)) << "waiting while others are busy";
  EXPECT_TRUE(cpu_impl::load_window(w, t += 50 * ms, 0.0, 0.0)) << "a spell holds 0.25 s at least";
  EXPECT_FALSE(cpu_impl::load_window(w, t += 250 * ms, 0.3, 0.1)) << "the others stopped";
  cpu_impl::LoadWatch unknown;
  EXPECT_TRUE(cpu_impl::load_window(unknown, t, 0.3, -1)) << "others unknown: the wait decides";
  EXPECT_TRUE(cpu_impl::load_window(unknown, t += 300 * ms, 0.1, -1)) << "between the two shares: no change";
  EXPECT_FALSE(cpu_impl::load_window(unknown, t += 50 * ms, 0.01, -1)) << "the wait ended";
}

// KILN_CPU_LOAD=auto (the default) turns the load watch on where float32 products keep their bits on any thread
// count (every product on oneMKL in its strict mode: two threads or fewer), else off.
TEST(ParallelFor, TheDefaultLoadPolicyFollowsWhetherProductsKeepTheirBits) {
  if (const char* set = std::getenv("KILN_CPU_LOAD"); set != nullptr && std::string(set) != "auto")
    GTEST_SKIP() << "KILN_CPU_LOAD=" << set << " chooses the policy";
  EXPECT_EQ(cpu_impl::load_policy(), cpu_impl::float32_products_keep_bits() ? "auto" : "ignore");
}

// Where the watch is on by default, a contended thread's float32 products run on one thread: their bits must be
// those of the full team's, or a run's results would depend on the machine's load (and a resumed run differ from
// the uninterrupted one). The shapes of the MLPs' products, and 10x100x100 and 5x32x16, which differed on one
// thread and on two without oneMKL's strict mode (5x32x16 also with MKL_CBWR=AUTO,STRICT). float64 products keep
// their thread count under the default (strict mode did not keep their bits).
TEST(ParallelFor, Float32ProductsKeepTheirBitsOnOneThreadWhereTheWatchIsOnByDefault) {
  if (!cpu_impl::float32_products_keep_bits())
    GTEST_SKIP() << "products may go to OpenBLAS here (or oneMKL is not strict): the watch is off by default";
  random::seed(11);
  const std::vector<std::array<int64_t, 3>> shapes = {{100, 784, 100}, {784, 100, 100},   {100, 100, 10},
                                                      {10, 100, 100},  {5, 32, 16},       {5, 128, 16},
                                                      {32, 37, 96},    {100, 1000, 1000}, {1000, 100, 1000}};
  const int threads = omp_get_max_threads();
  for (const auto& [m, k, n] : shapes) {
    const Array a = random::normal({m, k}, 0.0, 1.0, float32, cpu());
    const Array b = random::normal({k, n}, 0.0, 1.0, float32, cpu());
    const Array all = matmul(a, b);
    omp_set_num_threads(1);
    const Array one = matmul(a, b);
    omp_set_num_threads(threads);
    EXPECT_TRUE(array_equal(all, one)) << m << "x" << k << "x" << n << " on " << threads << " threads and on one";
  }
}

// KILN_CPU_POOL takes openmp or kiln; another value is a ValueError naming the variable and both values.
TEST(ParallelFor, AnUnknownKilnCpuPoolIsAValueError) {
  const char* old = std::getenv("KILN_CPU_POOL");
  const std::string saved = old ? old : "";
  setenv("KILN_CPU_POOL", "omp", 1);
  cpu_impl::set_team_for_testing(-1);
  try {
    (void)cpu_impl::on_openmp_team();
    ADD_FAILURE() << "no error for KILN_CPU_POOL=omp";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_CPU_POOL is 'omp'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("openmp"), std::string::npos) << e.what();
  }
  setenv("KILN_CPU_POOL", "kiln", 1);
  cpu_impl::set_team_for_testing(-1);
  EXPECT_FALSE(cpu_impl::on_openmp_team());
  if (old)
    setenv("KILN_CPU_POOL", saved.c_str(), 1);
  else
    unsetenv("KILN_CPU_POOL");
  cpu_impl::set_team_for_testing(-1);
}

// OMP_DYNAMIC=true (OpenMP may give a region fewer threads than asked) made OpenBLAS's OpenMP build wait forever
// in its threaded gemm: kiln turns dynamic teams off on every thread that runs its loops or calls a library.
TEST(ParallelFor, OpenmpDynamicTeamsAreTurnedOffWhereKilnRuns) {
  omp_set_dynamic(1);
  const Array a = random::normal({300, 300}, 0.0, 1.0, float32, cpu());
  const Array product = matmul(a, a);
  EXPECT_EQ(omp_get_dynamic(), 0) << "on the calling thread";
  EXPECT_TRUE(allclose(product, matmul(a.astype(float64), a.astype(float64)).astype(float32), 1e-4, 1e-4));
  int on_worker = -1;
  std::thread([&] {
    omp_set_dynamic(1);  // as a thread started under OMP_DYNAMIC=true begins
    (void)matmul(a, a);
    on_worker = omp_get_dynamic();
  }).join();
  EXPECT_EQ(on_worker, 0) << "on a thread of the user's";
}

// The scheduler statistics file each calling thread keeps open is closed when the thread ends: a program that
// starts many short-lived threads calling kiln does not run out of file descriptors.
TEST(ParallelFor, ThreadsThatEndCloseTheirLoadWatch) {
  auto open_files = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"), std::filesystem::directory_iterator{});
  };
  cpu_impl::set_contended_for_testing(-1);  // measure: each thread opens its statistics file
  const auto before = open_files();
  for (int i = 0; i < 64; ++i)
    std::thread([] {
      parallel_for(
          int64_t{1} << 16, [](int64_t, int64_t) {}, 1024);
    }).join();
  EXPECT_LE(open_files(), before + 2);
  cpu_impl::set_contended_for_testing(-2);
}
