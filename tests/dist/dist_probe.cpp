// A rank for the launcher tests (tests/dist/CMakeLists.txt): joins the default group through kiln launch's
// environment, prints what it sees, and meets the others at a barrier.
//   --fail-rank K        rank K exits with code 7 after joining (the others then wait in a barrier)
//   --skip-init-rank K   rank K never joins (the others must fail at init, not hang)
//   --check-omp          print OMP_NUM_THREADS and fail unless it is the launcher's share of the cores
//                        (max(1, cores / LOCAL_WORLD_SIZE)), for a launcher started without it
//   --ddp                on a GPU (gpu(LOCAL_RANK)): three DDP steps of a small MLP on this rank's share of a
//                        batch of 24 end with the parameters of one process trained on the whole batch; exits
//                        77 (skipped) without a GPU: CPU arrays need mpirun's MPI (the dist.mpi.* tests)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "kiln/dist.hpp"
#include "kiln/error.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

namespace {

std::shared_ptr<kiln::nn::Sequential> mlp(uint64_t seed) {
  kiln::random::seed(seed);
  auto m = std::make_shared<kiln::nn::Sequential>();
  m->push_back(std::make_shared<kiln::nn::Linear>(8, 16));
  m->push_back(std::make_shared<kiln::nn::ReLU>());
  m->push_back(std::make_shared<kiln::nn::Linear>(16, 4));
  return m;
}

/// DDP over the group equals one process on the whole batch (the reference, trained here too): 0 when equal.
int ddp_equals_whole_batch() {
  using namespace kiln;
  const int rank = dist::rank(), size = dist::world_size();
  const Device d = dist::default_group().device();
  auto local = mlp(100 + static_cast<uint64_t>(rank));  // DDP must broadcast rank 0's initialisation
  local->to(d);
  dist::DistributedDataParallel ddp(local, {.bucket_cap_mb = 0.0002});  // several buckets
  auto reference = mlp(100);
  reference->to(d);
  optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  random::seed(1234);
  const Array x = random::normal({24, 8}, float32, cpu()), y = random::randint(0, 4, {24}, int64, cpu());
  const int64_t share = 24 / size;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    nn::cross_entropy(ddp(x.slice(0, rank * share, (rank + 1) * share).to(d)),
                      y.slice(0, rank * share, (rank + 1) * share).to(d))
        .backward();
    opt.step();
    ref_opt.zero_grad();
    nn::cross_entropy((*reference)(x.to(d)), y.to(d)).backward();
    ref_opt.step();
  }
  const auto got = ddp.parameters(), want = reference->parameters();
  float worst = 0;
  for (size_t k = 0; k < got.size(); ++k)
    worst = std::max(worst, max(abs(got[k].to(cpu()) - want[k].to(cpu()))).item<float>());
  std::printf("probe rank %d: ddp over %d ranks on %s differs from the whole batch by %g: %s\n", rank, size,
              d.str().c_str(), static_cast<double>(worst), worst < 1e-5f ? "ddp ok" : "ddp WRONG");
  return worst < 1e-5f ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  int fail_rank = -1, skip_rank = -1, die_rank = -1;
  bool check_omp = false, ddp = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check-omp") == 0) check_omp = true;
    if (std::strcmp(argv[i], "--ddp") == 0) ddp = true;
  }
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--fail-rank") == 0) fail_rank = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--skip-init-rank") == 0) skip_rank = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--die-mid-collective") == 0) die_rank = std::atoi(argv[i + 1]);
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
  if (ddp && kiln::num_gpus() <= env.local_rank) {
    std::printf("probe rank %d: no GPU for local rank %d, skipped\n", env.rank, env.local_rank);
    return 77;
  }
  try {
    kiln::dist::init_process_group({.device = ddp ? kiln::gpu(env.local_rank) : kiln::cpu()});
    if (ddp && die_rank >= 0) {
      kiln::Array x = kiln::ones({1 << 20}, kiln::float32, kiln::dist::default_group().device());
      kiln::dist::default_group().all_reduce(x).synchronize();
      std::printf("probe rank %d: first all_reduce done\n", env.rank);
      std::fflush(stdout);
      auto work = kiln::dist::default_group().all_reduce(x);
      if (env.rank == die_rank) std::_Exit(7);  // the collective is queued on this rank's GPU
      work.synchronize();
      std::printf("probe rank %d: the second all_reduce completed without rank %d\n", env.rank, die_rank);
      return 3;
    }
    if (ddp) {
      const int rc = ddp_equals_whole_batch();
      kiln::dist::destroy_process_group();
      return rc;
    }
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
