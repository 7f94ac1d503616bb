// A rank for the launcher tests (tests/dist/CMakeLists.txt): joins the default group through kiln launch's
// environment, prints what it sees, and meets the others at a barrier.
//   --fail-rank K        rank K exits with code 7 after joining (the others then wait in a barrier)
//   --skip-init-rank K   rank K never joins (the others must fail at init, not hang)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "kiln/dist.hpp"
#include "kiln/error.hpp"

int main(int argc, char** argv) {
  int fail_rank = -1, skip_rank = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--fail-rank") == 0) fail_rank = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--skip-init-rank") == 0) skip_rank = std::atoi(argv[i + 1]);
  }
  const auto env = kiln::dist::launch_environment();
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
