// Process groups: joining (from kiln launch's environment or mpirun), operand checks, dispatch to the engine
// of the array's device (comm.hpp), and the default group.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include "dist/comm.hpp"
#include "dist/store.hpp"
#include "kiln/compile.hpp"
#include "kiln/cuda.hpp"
#include "kiln/error.hpp"
#include "kiln/ops.hpp"

namespace kiln::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

namespace detail {
std::string seconds_str(std::chrono::milliseconds t) {
  std::ostringstream s;
  s << static_cast<double>(t.count()) / 1000.0 << " s";
  return s.str();
}

DistError timeout_error(const std::string& op, int rank, int size, std::chrono::milliseconds timeout,
                        const std::string& consequence) {
  return DistError(op + ": rank " + std::to_string(rank) + " of " + std::to_string(size) + " waited " +
                   seconds_str(timeout) +
                   " and the operation did not complete: another rank died, hangs, or never "
                   "called " +
                   op + " (every rank must issue the same collectives in the same order)" + consequence +
                   "; raise the timeout with KILN_DIST_TIMEOUT=seconds if a rank is merely slow");
}

void pause_between_polls(int& spins) {
  if (++spins < 1000)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  throw ValueError("the environment variable " + std::string(name) + " is '" + v +
                   "': set it to 1/true/on/yes or 0/false/off/no, or unset it for the default (docs/environment.md)");
}

double env_positive(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !std::isfinite(x) || x <= 0)
    throw ValueError("the environment variable " + std::string(name) + " is '" + v +
                     "': set it to a number above zero, or unset it for the default (docs/environment.md)");
  return x;
}
}  // namespace detail

namespace {

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20)
    throw ValueError(std::string("dist: the environment variable ") + name + "=" + v +
                     " is not a non-negative integer");
  return static_cast<int>(x);
}

std::string env_str(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace

LaunchEnvironment launch_environment() {
  LaunchEnvironment e;
  const auto rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  if (rank && world) {
    e.from_launcher = true;
    e.rank = *rank;
    e.world_size = *world;
    e.local_rank = env_int("LOCAL_RANK").value_or(*rank);
    e.local_world_size = env_int("LOCAL_WORLD_SIZE").value_or(0);
  }
  auto mpi_rank = env_int("OMPI_COMM_WORLD_RANK"), mpi_size = env_int("OMPI_COMM_WORLD_SIZE");
  if (!mpi_rank) {  // MPICH and others
    mpi_rank = env_int("PMI_RANK");
    mpi_size = env_int("PMI_SIZE");
  }
  if (mpi_rank && mpi_size) {
    e.from_mpirun = true;
    if (!e.from_launcher) {
      e.rank = *mpi_rank;
      e.world_size = *mpi_size;
      e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(env_int("MPI_LOCALRANKID").value_or(*mpi_rank));
      e.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(env_int("MPI_LOCALNRANKS").value_or(0));
    }
  }
  return e;
}

namespace detail {
namespace {

/// The CPU engine of a group of one process started without mpirun: every collective is complete at once
/// (a sum over one rank is the array itself), so a single process needs no MPI.
class SelfBackend : public CommBackend {
 public:
  const char* name() const override { return "self"; }
  Work all_reduce(Array&, ReduceOp) override { return check(); }
  Work broadcast(Array&, int) override { return check(); }
  Work all_gather(Array& out, const Array& in) override {
    check();
    out.index({0}).assign(in);
    return Work();
  }
  Work reduce_scatter(Array& out, const Array& in, ReduceOp) override {
    check();
    out.assign(in.index({0}));
    return Work();
  }
  Work send(const Array&, int) override { return check(); }
  Work recv(Array&, int) override { return check(); }
  void barrier() override { check(); }
  void abort(const std::string& reason) override {
    if (failure_.empty()) failure_ = reason;
  }
  bool aborted() const override { return !failure_.empty(); }

 private:
  Work check() const {
    if (!failure_.empty()) throw DistError("dist: the process group was aborted earlier (" + failure_ + ")");
    return Work();
  }
  std::string failure_;
};

}  // namespace
}  // namespace detail

struct ProcessGroup::Impl {
  int rank = 0, size = 1, local_rank = 0;
  Device device = cpu();
  std::chrono::milliseconds timeout{};
  bool from_mpirun = false;
  std::unique_ptr<detail::Store> store;
  std::unique_ptr<detail::CommBackend> cpu_engine, gpu_engine;
  std::string aborted_reason;
  bool check_calls = false;

  /// KILN_DIST_DEBUG's check: every rank's (operation, dtype, shape, root) must equal rank 0's. It reads the
  /// ranks' signatures on the host, which a graph capture forbids: a captured collective is not checked (the
  /// eager steps before a capture are).
  void check_same_call(detail::CommBackend& e, Device d, const char* op, int code, const Array& x, int root) {
    if (!check_calls || size == 1) return;
#ifdef KILN_WITH_CUDA
    if (d.is_cuda() && cuda::is_capturing(d)) return;
#endif
    constexpr int64_t kSlots = 12, kDims = 8;
    std::vector<int64_t> sig(kSlots, -1);
    sig[0] = code;
    sig[1] = static_cast<int64_t>(x.dtype());
    sig[2] = x.ndim();
    for (int64_t i = 0; i < x.ndim(); ++i) {
      const int64_t slot = 3 + std::min(i, kDims - 1);
      sig[static_cast<size_t>(slot)] = i < kDims ? x.shape(i) : sig[static_cast<size_t>(slot)] * x.shape(i);
    }
    sig[kSlots - 1] = root;
    Array mine = from_data(sig, Shape{kSlots}, d);
    Array all = empty({size, kSlots}, int64, d);
    e.all_gather(all, mine).synchronize();
    const std::vector<int64_t> v = all.to_vector<int64_t>();
    auto describe = [&](int r) {
      const int64_t* p = v.data() + r * kSlots;
      std::string shape = "(";
      for (int64_t i = 0; i < std::min<int64_t>(p[2], kDims); ++i) shape += (i ? ", " : "") + std::to_string(p[3 + i]);
      shape += p[2] == 1 ? ",)" : ")";
      return "call #" + std::to_string(p[0]) + " on " + shape + " " +
             std::string(dtype_name(static_cast<DType>(p[1]))) +
             (p[kSlots - 1] >= 0 ? " root " + std::to_string(p[kSlots - 1]) : "");
    };
    for (int r = 1; r < size; ++r)
      if (!std::equal(v.begin(), v.begin() + kSlots, v.begin() + r * kSlots))
        throw ShapeError(std::string(op) + " (KILN_DIST_DEBUG): rank " + std::to_string(r) + " made " + describe(r) +
                         " but rank 0 made " + describe(0) +
                         "; every rank must call the same collectives in the same order with the same shapes and "
                         "dtypes (call numbers: 1 all_reduce, 2 broadcast, 3 all_gather, 4 reduce_scatter; +10 x op)");
  }

  void check_not_aborted(const char* op) const {
    if (!aborted_reason.empty())
      throw DistError(std::string(op) + ": the process group was aborted earlier (" + aborted_reason +
                      "); make a new group after fixing the cause");
  }

  detail::CommBackend& engine(Device d, const char* op) {
    check_not_aborted(op);
    if (d.is_cpu()) {
      if (cpu_engine) return *cpu_engine;
      throw DistError(std::string(op) + ": CPU arrays are reduced over MPI, and " +
                      (detail::mpi_available() ? "this process was not started by mpirun"
                                               : "this kiln was built without MPI (apt-get install libopenmpi-dev)") +
                      "; start the ranks with `mpirun -np " + std::to_string(size) +
                      " ...` or `kiln launch --backend mpi`, "
                      "or move the array to the group's GPU");
    }
    if (d != device)
      throw DeviceError(std::string(op) + ": the array is on " + d.str() + " but rank " + std::to_string(rank) +
                        "'s GPU is " + device.str() + "; move it there (each rank uses one GPU)");
    if (gpu_engine) return *gpu_engine;
    throw DistError(std::string(op) +
                    ": GPU arrays are reduced over NCCL, which this kiln was built without "
                    "(a CUDA build finds nccl.h and libnccl with CMake)");
  }
};

namespace {

/// A collective inside a step being traced by kiln::compile: its replay would skip it (collectives are not
/// backend calls), so refuse it.
void refuse_in_traced_step(const char* op) {
  if (tracing_step())
    throw ValueError(std::string(op) + ": a collective inside a step traced by kiln::compile, whose replays would "
                     "not repeat it; capture a DistributedDataParallel step in a CUDA graph (TrainStep graph) or run "
                     "it eagerly");
}

void require_contiguous(const Array& x, const char* op, const char* what) {
  refuse_in_traced_step(op);
  if (!x.defined()) throw ValueError(std::string(op) + ": " + what + " is an undefined array");
  if (!x.is_contiguous())
    throw ValueError(std::string(op) + ": " + what + " (shape " + shape_str(x.shape()) +
                     ") is not contiguous; collectives read and write whole buffers: pass x.copy() (and copy the "
                     "result back)");
}

void require_peer(int peer, int size, const char* op) {
  if (peer < 0 || peer >= size)
    throw ValueError(std::string(op) + ": rank " + std::to_string(peer) + " is out of range for a group of " +
                     std::to_string(size));
}

}  // namespace

ProcessGroup::ProcessGroup(InitOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& g = *impl_;
  const LaunchEnvironment env = launch_environment();
  g.rank = options.rank.value_or(env.rank);
  g.size = options.world_size.value_or(env.world_size);
  g.local_rank = options.local_rank.value_or(options.rank ? g.rank : env.local_rank);
  g.from_mpirun = env.from_mpirun;
  if (g.size < 1 || g.rank < 0 || g.rank >= g.size)
    throw ValueError("init_process_group: rank " + std::to_string(g.rank) + " is out of range for world size " +
                     std::to_string(g.size) + "; set RANK in [0, WORLD_SIZE)");
  if (options.timeout) {
    g.timeout = *options.timeout;
  } else {
    const double seconds = detail::env_positive("KILN_DIST_TIMEOUT", 300.0);
    g.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
  }
  if (g.timeout.count() <= 0) throw ValueError("init_process_group: the timeout must be positive");
  g.check_calls = options.check_calls.value_or(detail::env_flag("KILN_DIST_DEBUG", false));

  // MPI under mpirun (its world must be ours); a group of one started otherwise needs no engine for CPU arrays.
  if (g.size == 1 && !g.from_mpirun) {
    g.cpu_engine = std::make_unique<detail::SelfBackend>();
  } else if (detail::mpi_available() && g.from_mpirun) {
    const detail::MpiWorld w = detail::mpi_init(g.timeout);
    if (w.size != g.size || w.rank != g.rank)
      throw DistError("init_process_group: mpirun started " + std::to_string(w.size) + " ranks (this is rank " +
                      std::to_string(w.rank) + ") but the group asks for rank " + std::to_string(g.rank) + " of " +
                      std::to_string(g.size) + "; leave RANK/WORLD_SIZE unset under mpirun");
    g.cpu_engine = detail::make_mpi_backend(g.rank, g.size, g.timeout);
  }

  if (options.device) {
    g.device = *options.device;
  } else if (g.local_rank < num_gpus() && env.local_world_size <= num_gpus()) {
    // One GPU per rank. With fewer GPUs than local ranks every rank works on the CPU: ranks on GPUs would set up
    // NCCL (a collective the CPU ranks never join) and the group would hang.
    g.device = gpu(g.local_rank);
  }
  if (g.device.is_cuda() && g.device.index >= num_gpus())
    throw DeviceError("init_process_group: " + g.device.str() + " does not exist (this machine has " +
                      std::to_string(num_gpus()) + " GPU(s))");

  const bool want_store = !g.cpu_engine && g.size > 1;
  if (want_store) {
    const std::string addr = options.master_addr.empty() ? env_str("MASTER_ADDR", "127.0.0.1") : options.master_addr;
    const int port = options.master_port > 0 ? options.master_port : env_int("MASTER_PORT").value_or(29500);
    g.store = std::make_unique<detail::Store>(addr, port, g.rank, g.size, g.timeout);
  }
  if (g.device.is_cuda() && detail::nccl_available()) {
    std::string id = g.rank == 0 ? detail::nccl_unique_id() : std::string();
    if (g.size > 1) {
      if (g.cpu_engine)
        id = detail::mpi_broadcast_bytes(id, static_cast<int>(detail::nccl_unique_id().size()));
      else
        id = g.store->broadcast(id, "init (NCCL id)");
    }
    std::function<std::string()> departed;
    if (g.store) departed = [store = g.store.get()] { return store->departed(); };
    g.gpu_engine = detail::make_nccl_backend(g.rank, g.size, g.device, id, g.timeout, std::move(departed));
  }
}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::size() const { return impl_->size; }
int ProcessGroup::local_rank() const { return impl_->local_rank; }
Device ProcessGroup::device() const { return impl_->device; }
std::chrono::milliseconds ProcessGroup::timeout() const { return impl_->timeout; }

std::string ProcessGroup::backend(Device d) const { return impl_->engine(d, "backend").name(); }

Work ProcessGroup::all_reduce(Array& x, ReduceOp op) {
  require_contiguous(x, "all_reduce", "x");
  if (op == ReduceOp::avg && !is_floating(x.dtype()))
    throw DTypeError(std::string("all_reduce(avg): x is ") + std::string(dtype_name(x.dtype())) +
                     "; averaging needs a floating dtype: use sum and divide, or astype(float32)");
  if (op == ReduceOp::sum && x.dtype() == bool_)
    throw DTypeError("all_reduce(sum): x is bool; use max (any) or min (all), or astype(int32) to count");
  detail::CommBackend& e = impl_->engine(x.device(), "all_reduce");
  impl_->check_same_call(e, x.device(), "all_reduce", 1 + 10 * static_cast<int>(op), x, -1);
  return e.all_reduce(x, op);
}

Work ProcessGroup::broadcast(Array& x, int root) {
  require_contiguous(x, "broadcast", "x");
  require_peer(root, size(), "broadcast");
  detail::CommBackend& e = impl_->engine(x.device(), "broadcast");
  impl_->check_same_call(e, x.device(), "broadcast", 2, x, root);
  return e.broadcast(x, root);
}

Work ProcessGroup::all_gather(Array& out, const Array& in) {
  require_contiguous(in, "all_gather", "in");
  require_contiguous(out, "all_gather", "out");
  Shape want{size()};
  for (int64_t e : in.shape()) want.push_back(e);
  if (!(out.shape() == want) || out.dtype() != in.dtype() || out.device() != in.device())
    throw ShapeError("all_gather: out must be " + shape_str(want) + " " + std::string(dtype_name(in.dtype())) + " on " +
                     in.device().str() + " (world size, then in's shape), got " + shape_str(out.shape()) + " " +
                     std::string(dtype_name(out.dtype())) + " on " + out.device().str());
  detail::CommBackend& e = impl_->engine(in.device(), "all_gather");
  impl_->check_same_call(e, in.device(), "all_gather", 3, in, -1);
  return e.all_gather(out, in);
}

Work ProcessGroup::reduce_scatter(Array& out, const Array& in, ReduceOp op) {
  require_contiguous(in, "reduce_scatter", "in");
  require_contiguous(out, "reduce_scatter", "out");
  Shape want{size()};
  for (int64_t e : out.shape()) want.push_back(e);
  if (!(in.shape() == want) || out.dtype() != in.dtype() || out.device() != in.device())
    throw ShapeError("reduce_scatter: in must be " + shape_str(want) +
                     " (world size, then out's shape) with out's "
                     "dtype and device, got in " +
                     shape_str(in.shape()) + " " + std::string(dtype_name(in.dtype())) + " on " + in.device().str() +
                     ", out " + shape_str(out.shape()) + " " + std::string(dtype_name(out.dtype())) + " on " +
                     out.device().str());
  if (op == ReduceOp::avg && !is_floating(in.dtype()))
    throw DTypeError(std::string("reduce_scatter(avg): in is ") + std::string(dtype_name(in.dtype())) +
                     "; averaging needs a floating dtype");
  if (op == ReduceOp::sum && in.dtype() == bool_)
    throw DTypeError("reduce_scatter(sum): in is bool; use max or min, or astype(int32)");
  detail::CommBackend& e = impl_->engine(in.device(), "reduce_scatter");
  impl_->check_same_call(e, in.device(), "reduce_scatter", 4 + 10 * static_cast<int>(op), out, -1);
  return e.reduce_scatter(out, in, op);
}

Work ProcessGroup::send(const Array& x, int dst) {
  require_contiguous(x, "send", "x");
  require_peer(dst, size(), "send");
  if (dst == rank()) throw ValueError("send: rank " + std::to_string(dst) + " cannot send to itself");
  return impl_->engine(x.device(), "send").send(x, dst);
}

Work ProcessGroup::recv(Array& x, int src) {
  require_contiguous(x, "recv", "x");
  require_peer(src, size(), "recv");
  if (src == rank()) throw ValueError("recv: rank " + std::to_string(src) + " cannot receive from itself");
  return impl_->engine(x.device(), "recv").recv(x, src);
}

void ProcessGroup::barrier() {
  refuse_in_traced_step("barrier");
  Impl& g = *impl_;
  g.check_not_aborted("barrier");
  if (g.cpu_engine) return g.cpu_engine->barrier();
  if (g.gpu_engine) return g.gpu_engine->barrier();
  if (g.store) g.store->barrier("barrier");
}

void ProcessGroup::abort(const std::string& reason) {
  Impl& g = *impl_;
  if (g.aborted_reason.empty()) g.aborted_reason = reason;
  if (g.cpu_engine) g.cpu_engine->abort(reason);
  if (g.gpu_engine) g.gpu_engine->abort(reason);
}

bool ProcessGroup::aborted() const {
  const Impl& g = *impl_;
  return !g.aborted_reason.empty() || (g.cpu_engine && g.cpu_engine->aborted()) ||
         (g.gpu_engine && g.gpu_engine->aborted());
}

// ---------------------------------------------------------------- Work

bool Work::is_completed() const { return !impl_ || impl_->is_completed(); }
void Work::wait() {
  if (impl_) impl_->wait();
}
void Work::synchronize() {
  if (impl_) impl_->synchronize();
}

// ---------------------------------------------------------------- the default group

namespace {
// The default group's owner: set by init_process_group, cleared by destroy_process_group.
std::mutex g_default_mutex;
std::unique_ptr<ProcessGroup> g_default;
}  // namespace

void init_process_group(InitOptions options) {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  if (g_default)
    throw DistError("init_process_group: the default group is already initialised (rank " +
                    std::to_string(g_default->rank()) + " of " + std::to_string(g_default->size()) +
                    "); call destroy_process_group() first");
  g_default = std::make_unique<ProcessGroup>(std::move(options));
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  return g_default != nullptr;
}

ProcessGroup& default_group() {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  if (!g_default)
    throw DistError(
        "dist: no default process group; call kiln::dist::init_process_group() first (under kiln launch "
        "or mpirun)");
  return *g_default;
}

void destroy_process_group() {
  std::unique_ptr<ProcessGroup> g;
  {
    std::lock_guard<std::mutex> lock(g_default_mutex);
    g = std::move(g_default);
  }
}

int rank() { return is_initialized() ? default_group().rank() : 0; }
int world_size() { return is_initialized() ? default_group().size() : 1; }

namespace {
Work finish(Work w, bool async_op) {
  if (!async_op) w.wait();
  return w;
}
}  // namespace

Work all_reduce(Array& x, ReduceOp op, bool async_op) { return finish(default_group().all_reduce(x, op), async_op); }
Work broadcast(Array& x, int root, bool async_op) { return finish(default_group().broadcast(x, root), async_op); }
Work all_gather(Array& out, const Array& in, bool async_op) {
  return finish(default_group().all_gather(out, in), async_op);
}
Work reduce_scatter(Array& out, const Array& in, ReduceOp op, bool async_op) {
  return finish(default_group().reduce_scatter(out, in, op), async_op);
}
void send(const Array& x, int dst) { default_group().send(x, dst).synchronize(); }
void recv(Array& x, int src) { default_group().recv(x, src).wait(); }
void barrier() { default_group().barrier(); }

}  // namespace kiln::dist
