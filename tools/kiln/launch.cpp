// `kiln launch --nproc N program args...`: starts N ranks of a program on this machine, as torchrun does, or
// through mpirun (--backend mpi). Without mpirun the ranks find each other through RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; when one rank fails, the launcher stops the
// others and returns that rank's exit status, so a job never hangs on a dead rank.
#include "launch.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/error.hpp"

namespace kiln_cli {
namespace {

/// One line to stderr in one write: the launchers of several nodes and their ranks share a terminal (or a log),
/// and `std::cerr << a << b` writes each piece apart, so another process's line could land inside this one.
void say(const std::string& line) {
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

/// A TCP port that is free now (the kernel's choice), for MASTER_PORT.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    throw kiln::Error("kiln launch: could not find a free port; pass --master-port");
  }
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

bool on_path(const std::string& exe) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string p = path;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = p.find(':', start);
    const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && access((dir + "/" + exe).c_str(), X_OK) == 0) return true;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return false;
}

std::vector<pid_t> g_children;  // for the signal handler: Ctrl-C reaches every rank

void forward_signal(int sig) {
  for (pid_t p : g_children)
    if (p > 0) kill(p, sig);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void share_cpu_threads(int local_ranks) {
  // Each rank's CPU work (OpenMP, OpenBLAS, kiln's pool) would use every core: N ranks on one machine would
  // then run N times as many threads as cores. Give each rank its share unless the user chose (torchrun sets 1).
  if (local_ranks < 2 || std::getenv("OMP_NUM_THREADS")) return;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  setenv("OMP_NUM_THREADS", std::to_string(std::max(1, cores / local_ranks)).c_str(), 1);
}

int run_mpirun(const LaunchArgs& args) {
  if (!on_path("mpirun"))
    throw kiln::Error(
        "kiln launch --backend mpi: mpirun is not on PATH; apt-get install openmpi-bin, or use "
        "--backend env");
  if (args.nnodes > 1)
    throw kiln::ValueError(
        "kiln launch --backend mpi: for several machines run mpirun yourself (mpirun -np N -H "
        "host1:K,host2:K program), see docs/multi-gpu.md");
  // Open MPI refuses to start as root unless told; the user asked for these ranks explicitly.
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  share_cpu_threads(args.nproc);
  std::vector<std::string> argv{"mpirun", "-np", std::to_string(args.nproc)};
  for (const std::string& a : args.command) argv.push_back(a);
  std::vector<char*> c;
  for (std::string& a : argv) c.push_back(a.data());
  c.push_back(nullptr);
  std::cout.flush();
  execvp("mpirun", c.data());
  throw kiln::Error(std::string("kiln launch: could not start mpirun: ") + std::strerror(errno));
}

}  // namespace

std::string choose_backend(const LaunchArgs& args) {
  if (args.backend != "auto") return args.backend;
  // One GPU per rank: NCCL through the environment; otherwise the CPU ranks need MPI.
  if (kiln::num_gpus() >= args.nproc) return "env";
  return on_path("mpirun") ? "mpi" : "env";
}

int launch(const LaunchArgs& args) {
  if (args.nproc < 1) throw kiln::ValueError("kiln launch: --nproc must be at least 1");
  if (args.command.empty())
    throw kiln::ValueError("kiln launch: give the program to start (kiln launch --nproc 2 ./train)");
  const std::string backend = choose_backend(args);
  if (backend == "mpi") return run_mpirun(args);
  if (backend != "env") throw kiln::ValueError("kiln launch: --backend is auto, env or mpi, got " + args.backend);

  if (args.nnodes < 1 || args.node_rank < 0 || args.node_rank >= args.nnodes)
    throw kiln::ValueError("kiln launch: --node-rank " + std::to_string(args.node_rank) +
                           " is out of range for --nnodes " + std::to_string(args.nnodes));
  if (args.nnodes > 1 && args.master_port <= 0)
    throw kiln::ValueError(
        "kiln launch: with --nnodes > 1 give every machine the same --master-addr and --master-port");
  const int port = args.master_port > 0 ? args.master_port : free_port();
  const int world = args.nnodes * args.nproc;
  share_cpu_threads(args.nproc);
  std::vector<std::string> cmd = args.command;
  std::vector<char*> argv;
  for (std::string& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  g_children.assign(static_cast<size_t>(args.nproc), 0);
  for (int r = 0; r < args.nproc; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      forward_signal(SIGTERM);
      throw kiln::Error(std::string("kiln launch: fork failed: ") + std::strerror(errno));
    }
    if (pid == 0) {
      setenv("RANK", std::to_string(args.node_rank * args.nproc + r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(args.nproc).c_str(), 1);
      setenv("MASTER_ADDR", args.master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      execvp(argv[0], argv.data());
      std::fprintf(stderr, "kiln launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
      std::_Exit(127);
    }
    g_children[static_cast<size_t>(r)] = pid;
  }
  signal(SIGINT, forward_signal);
  signal(SIGTERM, forward_signal);

  // When a rank fails, the others get a short grace period to end on their own before SIGTERM: a rank that dies
  // closes its connections while still exiting, a peer that notices can exit first, and the launcher must not
  // kill the rank that failed first (its exit code is the one to report) in the middle of its exit.
  // A rank by its RANK; with several nodes, its node and local rank too (the others' launchers name theirs).
  auto name = [&](int local) {
    const std::string global = "rank " + std::to_string(args.node_rank * args.nproc + local);
    return args.nnodes > 1
               ? global + " (node " + std::to_string(args.node_rank) + ", local rank " + std::to_string(local) + ")"
               : global;
  };
  constexpr auto kGrace = std::chrono::seconds(1);
  constexpr auto kTermToKill = std::chrono::seconds(5);
  int result = 0, running = args.nproc;
  bool stopping = false, terminated = false;
  auto stop_started = std::chrono::steady_clock::now();
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, stopping ? WNOHANG : 0);
    if (pid == 0) {  // stopping: SIGTERM after the grace period, SIGKILL after another
      const auto waited = std::chrono::steady_clock::now() - stop_started;
      if (!terminated && waited > kGrace) {
        forward_signal(SIGTERM);
        terminated = true;
      } else if (waited > kGrace + kTermToKill) {
        forward_signal(SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int rank = -1;
    for (int r = 0; r < args.nproc; ++r)
      if (g_children[static_cast<size_t>(r)] == pid) rank = r;
    if (rank < 0) continue;
    g_children[static_cast<size_t>(rank)] = 0;
    --running;
    const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (failed && !stopping) {
      say("kiln launch: " + name(rank) + " " + describe(status) + "; stopping the other " + std::to_string(running) +
          " rank(s)" + (args.nnodes > 1 ? " of this node" : ""));
      result = exit_code(status);
      stopping = true;
      stop_started = std::chrono::steady_clock::now();
    } else if (failed && !(WIFSIGNALED(status) && (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGKILL))) {
      // Failed on its own while the others were being stopped (it may have been the first to fail: a rank
      // that noticed the loss can exit before the launcher reaps the one that died).
      say("kiln launch: " + name(rank) + " " + describe(status));
    }
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  return result;
}

}  // namespace kiln_cli
