// `kiln launch`: start the ranks of a data-parallel program on this machine (see launch.cpp).
#pragma once

#include <string>
#include <vector>

namespace kiln_cli {

struct LaunchArgs {
  int nproc = 1;  ///< ranks on this machine
  /// Several machines with the env backend (as torchrun): every machine runs one launcher with the same
  /// --nnodes, --master-addr and --master-port and its own --node-rank; ranks are node_rank * nproc + local.
  int nnodes = 1;
  int node_rank = 0;
  /// auto: env when the machine has a GPU per rank (NCCL), else mpi when mpirun exists; env: the ranks are
  /// started here with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT; mpi: through `mpirun -np N`.
  std::string backend = "auto";
  std::string master_addr = "127.0.0.1";
  int master_port = 0;               ///< 0: a free port
  std::vector<std::string> command;  ///< the program and its arguments
};

/// The backend `auto` resolves to on this machine.
std::string choose_backend(const LaunchArgs& args);
/// Runs the ranks to completion; returns 0, or the exit status of the first rank that failed.
int launch(const LaunchArgs& args);

}  // namespace kiln_cli
