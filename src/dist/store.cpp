// The TCP rendezvous (store.hpp): a star around rank 0, length-prefixed messages, every wait bounded by the
// group's timeout.
#include "dist/store.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "kiln/error.hpp"

namespace kiln::dist::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(std::chrono::milliseconds t) {
  return std::to_string(static_cast<double>(t.count()) / 1000.0).substr(0, 6) + " s";
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

/// Waits until `fd` is readable (POLLIN) or writable; false at the deadline.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

void set_nodelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

Store::Store(const std::string& addr, int port, int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout), where_(addr + ":" + std::to_string(port)) {
  if (size_ <= 1) return;
  const auto deadline = Clock::now() + timeout_;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (rank_ == 0) hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    throw DistError("dist init: cannot resolve MASTER_ADDR " + addr + ": " + gai_strerror(rc) +
                    "; set MASTER_ADDR to rank 0's host name or address");
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, freeaddrinfo);

  if (rank_ == 0) {
    listen_fd_ = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (listen_fd_ < 0 || bind(listen_fd_, found->ai_addr, found->ai_addrlen) != 0 || listen(listen_fd_, size_) != 0) {
      const std::string why = std::strerror(errno);
      if (listen_fd_ >= 0) close(listen_fd_);
      throw DistError("dist init: rank 0 cannot listen on " + where_ + " (" + why +
                      "); choose a free port with MASTER_PORT (kiln launch picks one)");
    }
    peers_.assign(static_cast<size_t>(size_), -1);
    int joined = 1;
    while (joined < size_) {
      if (!wait_fd(listen_fd_, POLLIN, deadline)) {
        std::string missing;
        for (int r = 1; r < size_; ++r)
          if (peers_[static_cast<size_t>(r)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        for (int fd : peers_)
          if (fd >= 0) close(fd);
        close(listen_fd_);
        throw DistError("dist init: rank(s) " + missing + " of " + std::to_string(size_) + " did not join at " +
                        where_ + " within " + seconds(timeout_) +
                        "; check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, "
                        "and that none of them failed before init_process_group");
      }
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      set_nodelay(fd);
      int32_t who = -1;
      const std::string hello = recv_message(fd, -1, "joining");
      if (hello.size() == sizeof who) std::memcpy(&who, hello.data(), sizeof who);
      if (who <= 0 || who >= size_ || peers_[static_cast<size_t>(who)] >= 0) {
        close(fd);
        throw DistError("dist init: a process joined " + where_ + " as rank " + std::to_string(who) +
                        ", which is out of range or taken (world size " + std::to_string(size_) +
                        "); give every process its own RANK in [0, WORLD_SIZE)");
      }
      peers_[static_cast<size_t>(who)] = fd;
      ++joined;
    }
    return;
  }

  // Ranks > 0: connect, retrying while rank 0 is not yet listening.
  std::string last_error = "no attempt";
  for (;;) {
    const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 && !connected_to_itself(fd)) {
      set_nodelay(fd);
      peers_.assign(1, fd);
      int32_t me = rank_;
      send_all(fd, std::string(reinterpret_cast<const char*>(&me), sizeof me), 0, "joining");
      return;
    }
    last_error = fd >= 0 && connected_to_itself(fd) ? "nothing listens there: the connection reached itself"
                                                    : std::strerror(errno);
    if (fd >= 0) close(fd);
    if (Clock::now() >= deadline)
      throw DistError("dist init: rank " + std::to_string(rank_) + " could not reach rank 0 at " + where_ + " within " +
                      seconds(timeout_) + " (" + last_error +
                      "); check that rank 0 started, and MASTER_ADDR / MASTER_PORT");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool connected_to_itself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_size = sizeof local, peer_size = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0)
    return false;
  if (local.ss_family != peer.ss_family) return false;
  if (local.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(local);
    const auto& b = reinterpret_cast<const sockaddr_in&>(peer);
    return a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
  }
  if (local.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(local);
    const auto& b = reinterpret_cast<const sockaddr_in6&>(peer);
    return a.sin6_port == b.sin6_port && std::memcmp(&a.sin6_addr, &b.sin6_addr, sizeof a.sin6_addr) == 0;
  }
  return false;
}

std::string Store::departed() const {
  std::string out;
  for (size_t i = 0; i < peers_.size(); ++i) {
    const int fd = peers_[i];
    if (fd < 0) continue;
    pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
    if (poll(&p, 1, 0) <= 0) continue;
    bool closed = (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
    if (!closed && (p.revents & POLLIN)) {
      char c = 0;  // readable: a message waiting, or the end of the stream (0 bytes)
      closed = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    if (closed) out += (out.empty() ? "rank " : ", rank ") + std::to_string(rank_ == 0 ? static_cast<int>(i) : 0);
  }
  return out;
}

Store::~Store() {
  for (int fd : peers_)
    if (fd >= 0) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void Store::send_all(int fd, const std::string& data, int peer, const char* what) {
  const auto deadline = Clock::now() + timeout_;
  uint64_t n = data.size();
  std::string framed(reinterpret_cast<const char*>(&n), sizeof n);
  framed += data;
  size_t done = 0;
  while (done < framed.size()) {
    if (!wait_fd(fd, POLLOUT, deadline))
      throw DistError(std::string("dist ") + what + ": rank " + std::to_string(rank_) + " could not send to rank " +
                      std::to_string(peer) + " within " + seconds(timeout_));
    const ssize_t k = ::send(fd, framed.data() + done, framed.size() - done, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      throw DistError(std::string("dist ") + what + ": rank " + std::to_string(rank_) +
                      " lost its connection to rank " + std::to_string(peer) + " (" + std::strerror(errno) +
                      "); that rank probably exited");
    done += static_cast<size_t>(k);
  }
}

std::string Store::recv_message(int fd, int peer, const char* what) {
  const auto deadline = Clock::now() + timeout_;
  auto read_exact = [&](char* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      if (!wait_fd(fd, POLLIN, deadline))
        throw DistError(std::string("dist ") + what + ": rank " + std::to_string(rank_) + " heard nothing from rank " +
                        (peer < 0 ? std::string("?") : std::to_string(peer)) + " within " + seconds(timeout_) +
                        "; that rank is stuck or never reached this point");
      const ssize_t k = ::recv(fd, dst + done, n - done, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0)
        throw DistError(std::string("dist ") + what + ": rank " + std::to_string(rank_) +
                        " lost its connection to rank " + (peer < 0 ? std::string("?") : std::to_string(peer)) +
                        "; that rank probably exited");
      done += static_cast<size_t>(k);
    }
  };
  uint64_t n = 0;
  read_exact(reinterpret_cast<char*>(&n), sizeof n);
  if (n > (uint64_t{1} << 30))
    throw DistError(std::string("dist ") + what + ": a message of " + std::to_string(n) +
                    " bytes; something other than a kiln rank is talking on " + where_);
  std::string data(static_cast<size_t>(n), '\0');
  read_exact(data.data(), data.size());
  return data;
}

std::vector<std::string> Store::all_gather(const std::string& blob, const char* what) {
  if (size_ <= 1) return {blob};
  std::vector<std::string> all(static_cast<size_t>(size_));
  if (rank_ == 0) {
    all[0] = blob;
    for (int r = 1; r < size_; ++r) all[static_cast<size_t>(r)] = recv_message(peers_[static_cast<size_t>(r)], r, what);
    std::string packed;
    for (const std::string& s : all) {
      uint64_t n = s.size();
      packed.append(reinterpret_cast<const char*>(&n), sizeof n);
      packed += s;
    }
    for (int r = 1; r < size_; ++r) send_all(peers_[static_cast<size_t>(r)], packed, r, what);
    return all;
  }
  send_all(peers_[0], blob, 0, what);
  const std::string packed = recv_message(peers_[0], 0, what);
  size_t at = 0;
  for (auto& s : all) {
    uint64_t n = 0;
    if (at + sizeof n > packed.size()) throw DistError(std::string("dist ") + what + ": a truncated reply from rank 0");
    std::memcpy(&n, packed.data() + at, sizeof n);
    at += sizeof n;
    if (at + n > packed.size()) throw DistError(std::string("dist ") + what + ": a truncated reply from rank 0");
    s = packed.substr(at, static_cast<size_t>(n));
    at += static_cast<size_t>(n);
  }
  return all;
}

std::string Store::broadcast(const std::string& blob, const char* what) {
  return all_gather(rank_ == 0 ? blob : std::string(), what)[0];
}

}  // namespace kiln::dist::detail
