// The engines under a process group (src/dist/README.md): a CommBackend per device kind. MPI (mpi.cpp) moves
// CPU arrays, NCCL (nccl.cpp) GPU arrays; group.cpp checks the operands once and dispatches on the device.
// Each engine keeps the arrays of an unfinished operation alive until it completes, so dropping a Work early
// never frees memory that a transfer still writes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "kiln/dist.hpp"
#include "kiln/error.hpp"

namespace kiln::dist {

struct Work::Impl {
  virtual ~Impl() = default;
  virtual bool is_completed() = 0;
  virtual void wait() = 0;
  virtual void synchronize() = 0;
};

namespace detail {

using Clock = std::chrono::steady_clock;

/// "2.5 s" for messages.
std::string seconds_str(std::chrono::milliseconds t);
/// The error of operation `op` that rank `rank` of `size` waited `timeout` for in vain; `consequence` says what
/// the engine did about it ("" when nothing).
DistError timeout_error(const std::string& op, int rank, int size, std::chrono::milliseconds timeout,
                        const std::string& consequence);
/// Between two polls of an unfinished operation: yield the first thousand times, then sleep 50 us.
void pause_between_polls(int& spins);
/// The KILN_* switches dist reads, with the spellings and errors of core's readers (src/core/env.hpp, outside
/// dist's layer): 1/true/on/yes or 0/false/off/no; `fallback` when unset or empty; ValueError naming the value else.
bool env_flag(const char* name, bool fallback);
/// A number above zero (seconds); `fallback` when unset or empty; ValueError naming the value otherwise.
double env_positive(const char* name, double fallback);

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  virtual const char* name() const = 0;
  virtual Work all_reduce(Array& x, ReduceOp op) = 0;
  virtual Work broadcast(Array& x, int root) = 0;
  virtual Work all_gather(Array& out, const Array& in) = 0;
  virtual Work reduce_scatter(Array& out, const Array& in, ReduceOp op) = 0;
  virtual Work send(const Array& x, int peer) = 0;
  virtual Work recv(Array& x, int peer) = 0;
  virtual void barrier() = 0;
  virtual void abort(const std::string& reason) = 0;
  virtual bool aborted() const = 0;
};

// ---- MPI (CPU arrays). Without MPI in the build, mpi_available() is false and the rest throw DistError.
bool mpi_available();
/// MPI_Init_thread once per process (finalised at exit); world rank, size and local rank. DistError when MPI's
/// initialisation does not complete within `timeout` (a rank of the job never joins).
struct MpiWorld {
  int rank = 0, size = 1, local_rank = 0;
};
MpiWorld mpi_init(std::chrono::milliseconds timeout);
/// Rank 0's bytes on every rank of MPI_COMM_WORLD (NCCL's unique id under mpirun).
std::string mpi_broadcast_bytes(const std::string& bytes, int size_if_not_root);
std::unique_ptr<CommBackend> make_mpi_backend(int rank, int size, std::chrono::milliseconds timeout);

// ---- NCCL (GPU arrays). Without NCCL in the build, nccl_available() is false and the rest throw DistError.
bool nccl_available();
/// A fresh ncclUniqueId as bytes (rank 0 makes it, the others receive it through MPI or the store).
std::string nccl_unique_id();
/// `departed` (optional) names the ranks known to have exited (the rendezvous' closed connections): a
/// collective that times out says which rank it was waiting for.
std::unique_ptr<CommBackend> make_nccl_backend(int rank, int size, Device device, const std::string& unique_id,
                                               std::chrono::milliseconds timeout,
                                               std::function<std::string()> departed = {});
/// One communicator per device of this process (ncclCommInitAll), rank i on devices[i].
std::vector<std::unique_ptr<CommBackend>> make_nccl_clique(const std::vector<Device>& devices,
                                                           std::chrono::milliseconds timeout);

}  // namespace detail
}  // namespace kiln::dist
