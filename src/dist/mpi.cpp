// The MPI engine (CPU arrays): nonblocking MPI collectives on a duplicate of MPI_COMM_WORLD, polled against the
// group's timeout. float16 / bfloat16 reductions run in float32 copies (one rounding at the end); avg is a sum
// divided by the world size. MPI is initialised once per process and finalised at exit, after the requests
// that are still pending have been drained.
#include "dist/comm.hpp"

#if KILN_HAVE_MPI
// The C API only: mpi.h would otherwise pull in the deprecated C++ bindings, which need another library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/error.hpp"
#include "kiln/ops.hpp"

namespace kiln::dist::detail {
namespace {

// MPI calls from any thread go through one lock: Open MPI provides MPI_THREAD_MULTIPLE, but the lock keeps
// kiln correct under an MPI that provides less, and MPI calls here are short (nonblocking starts and tests).
std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw DistError(std::string("MPI: ") + call + " failed: " + std::string(text, static_cast<size_t>(n)));
}

// Pending requests of every MPI group, drained before MPI_Finalize (at exit).
bool g_skip_finalize = false;
// An MPI_Init_thread that outlived the group's timeout: its thread is still blocked in MPI.
bool g_init_abandoned = false;

void finalize_at_exit() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin && !g_skip_finalize) MPI_Finalize();
}

MPI_Datatype mpi_type(DType t, const char* op) {
  switch (t) {
    case DType::Bool:
      return MPI_C_BOOL;
    case DType::Int8:
      return MPI_INT8_T;
    case DType::Int16:
      return MPI_INT16_T;
    case DType::Int32:
      return MPI_INT32_T;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::UInt8:
      return MPI_UINT8_T;
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Float16:
    case DType::BFloat16:
      return MPI_UINT16_T;  // data movement only: reductions go through float32
    case DType::Complex64:
    case DType::Complex128:
      break;
  }
  throw DTypeError(std::string(op) + ": no MPI type for " + std::string(dtype_name(t)));
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::Bool) return op == ReduceOp::min ? MPI_LAND : MPI_LOR;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

bool reduces_in_float32(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

struct MpiState {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::chrono::milliseconds timeout{};
  std::mutex mutex;
  std::string failure;  // set by a timeout or abort(): later operations throw it
  std::vector<std::shared_ptr<struct MpiWork>> pending;
};

struct MpiWork : Work::Impl {
  std::shared_ptr<MpiState> state;
  std::string op;
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<Array> keep;            // buffers MPI reads or writes until the request completes
  std::function<void()> on_complete;  // copy back / divide, run once on the thread that sees completion
  bool done = false;

  bool test_locked() {
    if (done) return true;
    int flag = 0;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      check(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    }
    if (flag) {
      done = true;
      if (on_complete) on_complete();
      on_complete = nullptr;
      keep.clear();
    }
    return done;
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(state->mutex);
    return test_locked();
  }
  void wait() override { synchronize(); }
  void synchronize() override {
    const auto deadline = Clock::now() + state->timeout;
    int spins = 0;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (test_locked()) return;
        if (!state->failure.empty()) throw DistError(op + ": the group failed earlier: " + state->failure);
        if (Clock::now() >= deadline) {
          state->failure = op + " on rank " + std::to_string(state->rank) + " did not complete within " +
                           seconds_str(state->timeout);
          throw timeout_error(op, state->rank, state->size, state->timeout, "");
        }
      }
      pause_between_polls(spins);
    }
  }
};

class MpiBackend : public CommBackend {
 public:
  MpiBackend(int rank, int size, std::chrono::milliseconds timeout) : state_(std::make_shared<MpiState>()) {
    state_->rank = rank;
    state_->size = size;
    state_->timeout = timeout;
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check(MPI_Comm_dup(MPI_COMM_WORLD, &state_->comm), "MPI_Comm_dup");
  }
  ~MpiBackend() override {
    // Drain what is pending (a peer that joins late completes it); a request that never completes is leaked
    // with its communicator, and MPI is not finalised (finalising would hang on it).
    const auto deadline = Clock::now() + std::max(state_->timeout, std::chrono::milliseconds(30000));
    std::lock_guard<std::mutex> lock(state_->mutex);
    try {
      for (auto& w : state_->pending)
        while (!w->test_locked() && Clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
    } catch (const std::exception&) {
    }
    bool stuck = false;
    for (auto& w : state_->pending) stuck = stuck || !w->done;
    if (stuck) {
      std::fprintf(stderr,
                   "kiln dist: rank %d: an MPI operation never completed; its communicator is left open and MPI is "
                   "not finalised\n",
                   state_->rank);
      g_skip_finalize = true;
      return;
    }
    state_->pending.clear();  // the works hold the state: break the cycle
    std::lock_guard<std::mutex> mlock(mpi_mutex());
    MPI_Comm_free(&state_->comm);
  }

  const char* name() const override { return "mpi"; }

  Work all_reduce(Array& x, ReduceOp op) override {
    const char* name = "all_reduce";
    Array buf = reduces_in_float32(x.dtype()) ? x.astype(float32) : x;
    auto w = start(std::string(name) + "(" + reduce_op_name(op) + ")", {x, buf}, [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), static_cast<int>(buf.size()), mpi_type(buf.dtype(), name),
                            mpi_op(op, buf.dtype()), state_->comm, r);
    });
    const int size = state_->size;
    w->on_complete = [x, buf, op, size]() mutable {
      if (op == ReduceOp::avg) divide(buf, Operand(static_cast<double>(size)), buf);
      if (buf.data_ptr() != x.data_ptr()) x.assign(buf);
    };
    return finish(w);
  }

  Work broadcast(Array& x, int root) override {
    auto w = start("broadcast", {x}, [&](MPI_Request* r) {
      return MPI_Ibcast(x.data_ptr(), count(x), mpi_type(x.dtype(), "broadcast"), root, state_->comm, r);
    });
    return finish(w);
  }

  Work all_gather(Array& out, const Array& in) override {
    auto w = start("all_gather", {out, in}, [&](MPI_Request* r) {
      return MPI_Iallgather(in.data_ptr(), count(in), mpi_type(in.dtype(), "all_gather"), out.data_ptr(), count(in),
                            mpi_type(in.dtype(), "all_gather"), state_->comm, r);
    });
    return finish(w);
  }

  Work reduce_scatter(Array& out, const Array& in, ReduceOp op) override {
    const char* name = "reduce_scatter";
    const bool widen = reduces_in_float32(in.dtype());
    Array src = widen ? in.astype(float32) : in;
    Array dst = widen ? empty(out.shape(), float32, cpu()) : out;
    auto w = start(std::string(name) + "(" + reduce_op_name(op) + ")", {out, in, src, dst}, [&](MPI_Request* r) {
      return MPI_Ireduce_scatter_block(src.data_ptr(), dst.data_ptr(), count(dst), mpi_type(dst.dtype(), name),
                                       mpi_op(op, dst.dtype()), state_->comm, r);
    });
    const int size = state_->size;
    w->on_complete = [out, dst, op, size]() mutable {
      if (op == ReduceOp::avg) divide(dst, Operand(static_cast<double>(size)), dst);
      if (dst.data_ptr() != out.data_ptr()) out.assign(dst);
    };
    return finish(w);
  }

  Work send(const Array& x, int peer) override {
    auto w = start("send", {x}, [&](MPI_Request* r) {
      return MPI_Isend(x.data_ptr(), count(x), mpi_type(x.dtype(), "send"), peer, 0, state_->comm, r);
    });
    return finish(w);
  }

  Work recv(Array& x, int peer) override {
    auto w = start("recv", {x}, [&](MPI_Request* r) {
      return MPI_Irecv(x.data_ptr(), count(x), mpi_type(x.dtype(), "recv"), peer, 0, state_->comm, r);
    });
    return finish(w);
  }

  void barrier() override {
    auto w = start("barrier", {}, [&](MPI_Request* r) { return MPI_Ibarrier(state_->comm, r); });
    Work(w).synchronize();
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->failure.empty()) state_->failure = reason;
  }
  bool aborted() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return !state_->failure.empty();
  }

 private:
  int count(const Array& x) const {
    if (x.size() > INT32_MAX)
      throw ValueError("dist (MPI): an array of " + std::to_string(x.size()) +
                       " elements is more than one MPI call takes (2^31 - 1); split it");
    return static_cast<int>(x.size());
  }

  template <class Start>
  std::shared_ptr<MpiWork> start(std::string op, std::vector<Array> keep, Start&& call) {
    auto w = std::make_shared<MpiWork>();
    w->state = state_;
    w->op = std::move(op);
    w->keep = std::move(keep);
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->failure.empty())
      throw DistError(w->op + ": the process group failed earlier (" + state_->failure +
                      "); make a new group after fixing the cause");
    // Forget completed requests; test the others (MPI progresses nonblocking collectives when called).
    std::erase_if(state_->pending, [](const std::shared_ptr<MpiWork>& p) { return p->test_locked(); });
    {
      std::lock_guard<std::mutex> mlock(mpi_mutex());
      check(call(&w->request), w->op.c_str());
    }
    return w;
  }

  Work finish(const std::shared_ptr<MpiWork>& w) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->pending.push_back(w);
    return Work(w);
  }

  std::shared_ptr<MpiState> state_;
};

}  // namespace

bool mpi_available() { return true; }

MpiWorld mpi_init(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) throw DistError("dist: MPI was finalised already; it cannot be initialised twice in one process");
  if (g_init_abandoned)
    throw DistError("init_process_group: an earlier MPI_Init_thread of this process did not complete within the "
                    "group's timeout and cannot be retried; start the job again with every rank calling "
                    "init_process_group");
  if (!init) {
    // MPI_Init_thread waits for every rank of the job, with no timeout of its own: it runs on a thread of its
    // own so that this one can give up after the group's timeout (the thread is left behind, blocked in MPI).
    // MPI_THREAD_MULTIPLE lets the other threads call MPI afterwards, and MPI_Finalize at exit.
    struct InitState {
      std::mutex mutex;
      std::condition_variable done_cv;
      bool done = false;
      int rc = MPI_SUCCESS, provided = 0;
    };
    auto state = std::make_shared<InitState>();
    std::thread([state] {
      int provided = 0;
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      std::lock_guard<std::mutex> done_lock(state->mutex);
      state->rc = rc;
      state->provided = provided;
      state->done = true;
      state->done_cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> wait_lock(state->mutex);
    if (!state->done_cv.wait_for(wait_lock, timeout, [&] { return state->done; })) {
      g_init_abandoned = true;
      throw DistError("init_process_group: MPI_Init_thread did not complete within " + seconds_str(timeout) +
                      ": a rank of this job exited or hangs before calling init_process_group (MPI's "
                      "initialisation waits for every rank that mpirun started); make every rank call it, or raise "
                      "the timeout (InitOptions::timeout, KILN_DIST_TIMEOUT) if a rank is merely slow to start");
    }
    check(state->rc, "MPI_Init_thread");
    if (state->provided < MPI_THREAD_SERIALIZED)
      throw DistError("init_process_group: this MPI provides thread level " + std::to_string(state->provided) +
                      " (below MPI_THREAD_SERIALIZED), which kiln's threads need; use an MPI built with thread "
                      "support (Open MPI's Debian package has it)");
    std::atexit(finalize_at_exit);
  }
  MpiWorld w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  MPI_Comm local;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type");
  MPI_Comm_rank(local, &w.local_rank);
  MPI_Comm_free(&local);
  return w;
}

std::string mpi_broadcast_bytes(const std::string& bytes, int size_if_not_root) {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string buf = rank == 0 ? bytes : std::string(static_cast<size_t>(size_if_not_root), '\0');
  check(MPI_Bcast(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return buf;
}

std::unique_ptr<CommBackend> make_mpi_backend(int rank, int size, std::chrono::milliseconds timeout) {
  return std::make_unique<MpiBackend>(rank, size, timeout);
}

}  // namespace kiln::dist::detail

#else  // no MPI in this build

#include "kiln/error.hpp"

namespace kiln::dist::detail {
namespace {
[[noreturn]] void no_mpi() {
  throw DistError("dist: this kiln was built without MPI; apt-get install libopenmpi-dev openmpi-bin and rebuild");
}
}  // namespace
bool mpi_available() { return false; }
MpiWorld mpi_init(std::chrono::milliseconds) { no_mpi(); }
std::string mpi_broadcast_bytes(const std::string&, int) { no_mpi(); }
std::unique_ptr<CommBackend> make_mpi_backend(int, int, std::chrono::milliseconds) { no_mpi(); }
}  // namespace kiln::dist::detail

#endif
