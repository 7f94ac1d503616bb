// The NCCL engine (GPU arrays). Each operation runs on the group's communication stream, after the work queued
// so far on the caller's current stream (an event), so communication overlaps the computation that follows
// (DDP's buckets during backward); Work::wait() makes the current stream wait for it, without the host.
// Communicators are blocking (each call returns once queued; see make_nccl_backend for why and the opt-out).
// A watchdog thread per communicator watches the unfinished operations: one that has not completed within the
// group's timeout, or an asynchronous NCCL error, aborts the communicator (ncclCommAbort makes the kernels
// waiting for a dead peer return) and every later operation throws DistError with the reason.
// A collective queued while the caller's stream is captured into a CUDA graph (a DDP step captured by
// train::TrainStep) becomes nodes of that graph: the communication stream joins the capture through the event,
// and the collective runs at every replay. Its Work orders the capture (wait) but has no completion of its own
// to poll, so the watchdog does not track it (as PyTorch's process groups skip captured work); a replay that
// waits for a dead peer is not aborted by the timeout.
#include "dist/comm.hpp"

#if KILN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/cuda.hpp"
#include "kiln/error.hpp"
#include "kiln/ops.hpp"
#include "kiln/stream.hpp"

namespace kiln::dist::detail {
namespace {

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw DistError(std::string("NCCL setup: ") + call + " failed: " + cudaGetErrorString(e));
}

/// NCCL's type for reducing `t` (moves of data go as bytes).
ncclDataType_t nccl_reduce_type(DType t, const char* op) {
  switch (t) {
    case DType::Int8:
      return ncclInt8;
    case DType::UInt8:
      return ncclUint8;
    case DType::Bool:
      return ncclUint8;  // max = any, min = all on 0/1 bytes
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int16:
    case DType::Complex64:
    case DType::Complex128:
      break;
  }
  throw DTypeError(std::string(op) + ": NCCL cannot reduce " + std::string(dtype_name(t)) +
                   " arrays; astype(int32) first");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

struct NcclWork;

struct NcclState {
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1;
  Device device = cpu();
  std::chrono::milliseconds timeout{};
  std::optional<Stream> stream;  // communication stream
  std::mutex mutex;
  std::condition_variable wake;
  std::string failure;
  bool stop = false;
  std::vector<std::shared_ptr<NcclWork>> pending;
  std::thread watchdog;
  std::function<std::string()> departed;  // see make_nccl_backend

  /// What the rendezvous knows of exited ranks, as a clause to append to a timeout's message.
  std::string departed_clause() const {
    if (!departed) return "";
    const std::string who = departed();
    return who.empty() ? "" : "; " + who + " exited (its connection to the rendezvous closed)";
  }

  // Under `mutex`: abort the communicator once, remembering why. The collectives still in flight are marked
  // failed: their kernels return when the communicator is aborted, but what they wrote is not the result.
  void abort_locked(const std::string& reason);

  // Under `mutex`, after a call: in nonblocking mode NCCL may still be working on it; wait for the result.
  void settle_locked(ncclResult_t rc, const std::string& what) {
    const auto deadline = Clock::now() + timeout;
    while (rc == ncclInProgress) {
      if (Clock::now() >= deadline) {
        abort_locked(what + " did not start within " + seconds_str(timeout));
        throw DistError(what + ": rank " + std::to_string(rank) + " of " + std::to_string(size) + " waited " +
                        seconds_str(timeout) +
                        " for NCCL; another rank died or never joined (the communicator is aborted)");
      }
      std::this_thread::yield();
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) break;
      rc = st;
    }
    if (rc != ncclSuccess) {
      const std::string why = std::string(ncclGetErrorString(rc)) + " (" + ncclGetLastError(comm) + ")";
      abort_locked(what + " failed: " + why);
      throw DistError(what + ": NCCL failed on rank " + std::to_string(rank) + ": " + why);
    }
  }
};

struct NcclWork : Work::Impl {
  std::shared_ptr<NcclState> state;
  std::string op;
  std::optional<Event> done;
  std::vector<Array> keep;  // buffers the communication stream uses, kept until it is done with them
  Clock::time_point started = Clock::now();
  bool completed = false;
  bool captured = false;  // queued during a graph capture: its events belong to the graph
  bool failed = false;    // in flight when the communicator was aborted

  /// The error of asking a captured collective for completion (it has none: it runs at each replay).
  ValueError captured_error(const char* call) const {
    return ValueError(op + ": " + call +
                      " on a collective captured in a CUDA graph; it runs at each replay of "
                      "the graph: wait() orders the capture after it, and after a replay synchronise the "
                      "replay's stream instead");
  }

  // Under state->mutex.
  bool poll_locked() {
    if (completed) return true;
    if (done->query()) {
      completed = true;
      keep.clear();
    }
    return completed;
  }

  // Under state->mutex, once complete: a collective the abort cut short is an error, not a result.
  void throw_if_failed_locked() const {
    if (failed)
      throw DistError(op + ": rank " + std::to_string(state->rank) + " of " + std::to_string(state->size) +
                      ": the communicator was aborted while this collective was in flight (" + state->failure +
                      "); its output is not the result; make a new process group after fixing the cause");
  }
  bool is_completed() override {
    if (captured) throw captured_error("is_completed()");
    std::lock_guard<std::mutex> lock(state->mutex);
    if (!poll_locked()) return false;
    throw_if_failed_locked();
    return true;
  }
  void wait() override {
    if (captured) {
      if (!cuda::is_capturing(state->device)) throw captured_error("wait() after the capture ended");
      done->wait(Stream::current(state->device));  // the capture's stream joins the communication stream back
      return;
    }
    std::lock_guard<std::mutex> lock(state->mutex);
    if (!state->failure.empty() && !poll_locked())
      throw DistError(op + ": the communicator was aborted: " + state->failure);
    throw_if_failed_locked();
    done->wait(Stream::current(state->device));
  }
  void synchronize() override {
    if (captured) throw captured_error("synchronize()");
    const auto deadline = started + state->timeout;
    int spins = 0;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (poll_locked()) {
          throw_if_failed_locked();
          return;
        }
        if (!state->failure.empty()) throw DistError(op + ": the communicator was aborted: " + state->failure);
        if (Clock::now() >= deadline) {
          const std::string why = op + " on rank " + std::to_string(state->rank) + " did not complete within " +
                                  seconds_str(state->timeout);
          const std::string gone = state->departed_clause();
          state->abort_locked(why + gone);
          throw timeout_error(op, state->rank, state->size, state->timeout, "; the communicator is aborted" + gone);
        }
      }
      pause_between_polls(spins);
    }
  }
};

void NcclState::abort_locked(const std::string& reason) {
  if (failure.empty()) failure = reason;
  if (comm) {
    for (const auto& w : pending)
      if (!w->poll_locked()) w->failed = true;
    cudaSetDevice(device.index);
    ncclCommAbort(comm);
    comm = nullptr;
  }
}

void watchdog_loop(NcclState* s) {
  check_cuda(cudaSetDevice(s->device.index), "cudaSetDevice");
  std::unique_lock<std::mutex> lock(s->mutex);
  while (!s->stop) {
    s->wake.wait_for(lock, std::chrono::milliseconds(100));
    if (s->stop) break;
    try {
      std::erase_if(s->pending, [](const std::shared_ptr<NcclWork>& w) { return w->poll_locked(); });
      if (s->comm) {
        ncclResult_t st = ncclSuccess;
        if (ncclCommGetAsyncError(s->comm, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress) {
          const std::string why =
              std::string("NCCL reported ") + ncclGetErrorString(st) + " (" + ncclGetLastError(s->comm) + ")" +
              s->departed_clause();
          std::fprintf(stderr, "kiln dist: rank %d: %s; aborting the communicator\n", s->rank, why.c_str());
          s->abort_locked(why);
        }
      }
      for (const auto& w : s->pending) {
        if (Clock::now() - w->started > s->timeout && s->comm) {
          const std::string why = w->op + " on rank " + std::to_string(s->rank) + " did not complete within " +
                                  seconds_str(s->timeout) + " (a rank died, hangs, or skipped it)" +
                                  s->departed_clause();
          std::fprintf(stderr, "kiln dist: %s; aborting the communicator\n", why.c_str());
          s->abort_locked(why);
        }
      }
      if (!s->comm) {  // aborted: the kernels returned; completed events let the buffers go
        std::erase_if(s->pending, [](const std::shared_ptr<NcclWork>& w) { return w->poll_locked(); });
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln dist: rank %d: watchdog: %s\n", s->rank, e.what());
    }
  }
}

class NcclBackend : public CommBackend {
 public:
  NcclBackend(std::shared_ptr<NcclState> state) : state_(std::move(state)) {
    state_->stream = Stream::create(state_->device);
    state_->watchdog = std::thread(watchdog_loop, state_.get());
  }
  ~NcclBackend() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stop = true;
    }
    state_->wake.notify_all();
    if (state_->watchdog.joinable()) state_->watchdog.join();
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->comm) {
      cudaSetDevice(state_->device.index);
      // Let queued operations finish (bounded by the timeout), then free the communicator with ncclCommAbort,
      // as PyTorch's process groups do: ncclCommDestroy of a blocking communicator is a collective that waits
      // for every rank to destroy theirs, so a rank that leaves early (an exception, a failed group) would hang.
      const auto deadline = Clock::now() + state_->timeout;
      for (auto& w : state_->pending)
        while (!w->poll_locked() && Clock::now() < deadline) std::this_thread::yield();
      ncclCommAbort(state_->comm);
      state_->comm = nullptr;
    }
    state_->pending.clear();  // the works hold the state: break the cycle
  }

  const char* name() const override { return "nccl"; }

  Work all_reduce(Array& x, ReduceOp op) override {
    const ncclDataType_t t = nccl_reduce_type(x.dtype(), "all_reduce");
    return enqueue(std::string("all_reduce(") + reduce_op_name(op) + ")", {x}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(x.data_ptr(), x.data_ptr(), static_cast<size_t>(x.size()), t, nccl_op(op), c, s);
    });
  }
  Work broadcast(Array& x, int root) override {
    return enqueue("broadcast", {x}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(x.data_ptr(), x.data_ptr(), static_cast<size_t>(x.nbytes()), ncclUint8, root, c, s);
    });
  }
  Work all_gather(Array& out, const Array& in) override {
    return enqueue("all_gather", {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.nbytes()), ncclUint8, c, s);
    });
  }
  Work reduce_scatter(Array& out, const Array& in, ReduceOp op) override {
    const ncclDataType_t t = nccl_reduce_type(in.dtype(), "reduce_scatter");
    return enqueue(std::string("reduce_scatter(") + reduce_op_name(op) + ")", {out, in},
                   [&](ncclComm_t c, cudaStream_t s) {
                     return ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.size()), t,
                                              nccl_op(op), c, s);
                   });
  }
  Work send(const Array& x, int peer) override {
    return enqueue("send", {x}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclSend(x.data_ptr(), static_cast<size_t>(x.nbytes()), ncclUint8, peer, c, s);
    });
  }
  Work recv(Array& x, int peer) override {
    return enqueue("recv", {x}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclRecv(x.data_ptr(), static_cast<size_t>(x.nbytes()), ncclUint8, peer, c, s);
    });
  }
  void barrier() override {
    Array one = ones({1}, float32, state_->device);
    all_reduce(one, ReduceOp::sum).synchronize();
  }
  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->abort_locked(reason);
  }
  bool aborted() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return !state_->failure.empty();
  }

 private:
  template <class Call>
  Work enqueue(std::string op, std::vector<Array> keep, Call&& call) {
    auto w = std::make_shared<NcclWork>();
    w->state = state_;
    w->op = std::move(op);
    Stream current = Stream::current(state_->device);
    w->captured = cuda::is_capturing(state_->device);
    Event ready = Event::create(state_->device, false);
    ready.record(current);
    w->done = Event::create(state_->device, false);
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (!state_->failure.empty() || !state_->comm)
        throw DistError(w->op + ": the communicator was aborted earlier (" + state_->failure +
                        "); make a new process group after fixing the cause");
      check_cuda(cudaSetDevice(state_->device.index), "cudaSetDevice");
      ready.wait(*state_->stream);
      auto s = static_cast<cudaStream_t>(state_->stream->handle());
      state_->settle_locked(call(state_->comm, s), w->op);
      w->done->record(*state_->stream);
      for (const Array& a : keep) a.record_stream(*state_->stream);
      // Captured: nothing to poll. As for any captured work, memory allocated in the capture stays in the graph's
      // pool, and arrays from outside it are the caller's to keep alive while the graph may be replayed.
      if (w->captured) return Work(w);
      w->keep = std::move(keep);
      w->started = Clock::now();
      state_->pending.push_back(w);
    }
    return Work(w);
  }

  std::shared_ptr<NcclState> state_;
};

std::shared_ptr<NcclState> new_state(int rank, int size, Device device, std::chrono::milliseconds timeout) {
  if (!device.is_cuda()) throw DeviceError("NCCL: a communicator needs a GPU, got " + device.str());
  auto s = std::make_shared<NcclState>();
  s->rank = rank;
  s->size = size;
  s->device = device;
  s->timeout = timeout;
  return s;
}

}  // namespace

bool nccl_available() { return true; }

std::string nccl_unique_id() {
  ncclUniqueId id;
  if (ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess)
    throw DistError(std::string("NCCL: ncclGetUniqueId failed: ") + ncclGetErrorString(rc));
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

std::unique_ptr<CommBackend> make_nccl_backend(int rank, int size, Device device, const std::string& unique_id,
                                               std::chrono::milliseconds timeout,
                                               std::function<std::string()> departed) {
  auto s = new_state(rank, size, device, timeout);
  s->departed = std::move(departed);
  ncclUniqueId id;
  if (unique_id.size() != sizeof id)
    throw DistError("NCCL init: the unique id has " + std::to_string(unique_id.size()) + " bytes, expected " +
                    std::to_string(sizeof id) + "; every rank must run the same kiln");
  std::memcpy(&id, unique_id.data(), sizeof id);
  check_cuda(cudaSetDevice(device.index), "cudaSetDevice");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Blocking communicators (PyTorch's default): a call returns once its kernel is queued. A nonblocking
  // communicator hands every call to a new host thread of NCCL's (pthread_create per collective) and the caller
  // polls for it, about twice a blocking call's host time per collective (bench/results/dist-h200x2-2026-11-26.md),
  // which a small model's data-parallel step cannot hide. The rendezvous (or MPI) has seen every
  // rank before this init, and NCCL_RUNTIME_CONNECT=0 (unless the user set it) makes init connect the
  // collectives' channels, so no later collective blocks the host waiting for a peer: kernels wait on the GPU,
  // where the watchdog bounds them. KILN_NCCL_NONBLOCKING=1 bounds init and connection by the timeout too.
  const bool nonblocking = env_flag("KILN_NCCL_NONBLOCKING", false);
  config.blocking = nonblocking ? 0 : 1;
  if (!nonblocking) setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    ncclResult_t rc = ncclCommInitRankConfig(&s->comm, size, id, rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      throw DistError(std::string("NCCL init: ncclCommInitRankConfig failed on rank ") + std::to_string(rank) + ": " +
                      ncclGetErrorString(rc) + "; check that every rank sees its own GPU");
    }
    try {
      s->settle_locked(rc, "init_process_group (NCCL)");
    } catch (const DistError& e) {
      throw DistError(std::string(e.what()) + "; ranks that never joined: check that all " + std::to_string(size) +
                      " were started");
    }
  }
  return std::make_unique<NcclBackend>(s);
}

std::vector<std::unique_ptr<CommBackend>> make_nccl_clique(const std::vector<Device>& devices,
                                                           std::chrono::milliseconds timeout) {
  const int n = static_cast<int>(devices.size());
  std::vector<int> ids;
  for (const Device& d : devices) {
    if (!d.is_cuda()) throw DeviceError("DataParallel: every device must be a GPU, got " + d.str());
    ids.push_back(d.index);
  }
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  if (ncclResult_t rc = ncclCommInitAll(comms.data(), n, ids.data()); rc != ncclSuccess)
    throw DistError(std::string("NCCL: ncclCommInitAll over ") + std::to_string(n) +
                    " GPUs failed: " + ncclGetErrorString(rc));
  std::vector<std::unique_ptr<CommBackend>> out;
  for (int i = 0; i < n; ++i) {
    auto s = new_state(i, n, devices[static_cast<size_t>(i)], timeout);
    s->comm = comms[static_cast<size_t>(i)];
    out.push_back(std::make_unique<NcclBackend>(s));
  }
  return out;
}

}  // namespace kiln::dist::detail

#else  // no NCCL in this build

#include "kiln/error.hpp"

namespace kiln::dist::detail {
namespace {
[[noreturn]] void no_nccl() {
  throw DistError("dist: this kiln was built without NCCL (a CUDA build finds nccl.h and libnccl with CMake)");
}
}  // namespace
bool nccl_available() { return false; }
std::string nccl_unique_id() { no_nccl(); }
std::unique_ptr<CommBackend> make_nccl_backend(int, int, Device, const std::string&, std::chrono::milliseconds,
                                               std::function<std::string()>) {
  no_nccl();
}
std::vector<std::unique_ptr<CommBackend>> make_nccl_clique(const std::vector<Device>&, std::chrono::milliseconds) {
  no_nccl();
}
}  // namespace kiln::dist::detail

#endif
