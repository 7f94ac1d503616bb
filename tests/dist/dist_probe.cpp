// A rank for the launcher tests (tests/dist/CMakeLists.txt): joins the default group through kiln launch's
// environment, prints what it sees, and meets the others at a barrier.
//   --fail-rank K        rank K exits with code 7 after joining (the others then wait in a barrier)
//   --skip-init-rank K   rank K never joins (the others must fail at init, not hang)
//   --check-omp          print OMP_NUM_THREADS and fail unless it is the launcher's share of the cores
//                        (max(1, cores / LOCAL_WORLD_SIZE)), for a launcher started without it
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "kiln/dist.hpp"
#include "kiln/error.hpp"

int main(int argc, char** argv) {
  int fail_rank = -1, skip_rank = -1;
  bool check_omp = false;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--check-omp") == 0) check_omp = true;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--fail-rank") == 0) fail_rank = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--skip-init-rank") == 0) skip_rank = std::atoi(argv[i + 1]);
  }
  const auto env = kiln::dist::launch_environment();
  if (check_omp) {
    const char* omp = std::getenv("OMP_NUM_THREADS");
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int want = std::max(1, cores / std::max(1, local ? std::atoi(local) : 1));
    const bool ok = omp && std::atoi(omp) == want;
    std::printf("probe rank %d: OMP_NUM_THREADS=%s for %d cores and %s local ranks: %s\n", env.rank,
                omp ? omp : "(unset)", cores, local ? local : "?", ok ? "omp ok" : "omp WRONG");
    return ok ? 0 : 3;
  }
  if (env.rank == skip_rank) {
    std::this_thread::sleep_for(std::chrono::seconds(30));  // the launcher stops it when the others fail
    return 0;
  }
  try {
    kiln::dist::init_process_group({.device = kiln::cpu()});
    std::printf("probe rank %d of %d local %d joined\n", kiln::dist::rank(), kiln::dist::world_size(),
                kiln::dist::default_group().local_rank());
    std::fflush(stdout);
    if (kiln::dist::rank() == fail_rank) return 7;
    kiln::dist::barrier();
    kiln::dist::destroy_process_group();
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "probe rank %d: %s\n", env.rank, e.what());
    return 2;
  }
  return 0;
}
