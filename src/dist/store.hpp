// The rendezvous of processes started without mpirun (kiln launch, torchrun-style environments): rank 0
// listens on MASTER_ADDR:MASTER_PORT, the others connect to it; small blobs (NCCL's unique id, parameter
// signatures) are exchanged through it. It carries no array data: collectives run on NCCL or MPI.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace kiln::dist::detail {

/// True when the connected TCP socket `fd` is connected to itself (its local address and port are its peer's):
/// a connect to a port in the ephemeral range on this machine with nothing listening there can pick that very
/// port as its source and succeed by simultaneous open. Such a socket reaches no other process.
bool connected_to_itself(int fd);

class Store {
 public:
  /// Connects the `size` ranks; DistError naming the missing ranks (rank 0) or the unreachable address
  /// (the others) when the group is not complete within `timeout`.
  Store(const std::string& addr, int port, int rank, int size, std::chrono::milliseconds timeout);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Every rank's blob, in rank order, on every rank.
  std::vector<std::string> all_gather(const std::string& blob, const char* what);
  /// Rank `root`'s blob on every rank (root 0 only).
  std::string broadcast(const std::string& blob, const char* what);
  void barrier(const char* what) { (void)all_gather(std::string(), what); }
  /// The ranks whose connection to this one has closed (their process exited), as "rank 1, rank 3", or ""
  /// — without waiting or reading anything (rank 0 sees every rank; the others see rank 0 only). It names the
  /// rank a timed-out collective of another engine (NCCL) was waiting for.
  std::string departed() const;

 private:
  void send_all(int fd, const std::string& data, int peer, const char* what);
  std::string recv_message(int fd, int peer, const char* what);
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::string where_;
  int listen_fd_ = -1;
  std::vector<int> peers_;  // rank 0: fd of rank r (index r); others: peers_[0] = the connection to rank 0
};

}  // namespace kiln::dist::detail
