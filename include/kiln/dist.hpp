// kiln::dist: several processes (and several GPUs) working on one job, as torch.distributed.
//
// A process group spans `world_size` processes, one per GPU (or per CPU share). Collectives on GPU arrays run
// on NCCL, on CPU arrays on MPI (Open MPI); kiln has no transport of its own. Processes are started by
// `kiln launch --nproc N program args...` (as torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT in the environment) or by `mpirun -np N program args...`.
//
//   kiln::dist::init_process_group();                 // from the environment or from mpirun
//   Array g = ...;                                    // on cuda:LOCAL_RANK (NCCL) or the CPU (MPI)
//   kiln::dist::all_reduce(g, kiln::dist::ReduceOp::avg);
//   auto model = std::make_shared<kiln::dist::DistributedDataParallel>(net);  // gradients all-reduced in backward
//
// Every operation is ordered on the calling thread's current stream and returns a Work handle: wait() orders
// the current stream after the operation (GPU: no host synchronisation) or blocks until it is done (MPI);
// synchronize() blocks the host. A rank that dies or never joins makes the others fail with DistError within
// the group's timeout (NCCL's communicator is aborted by a watchdog), never hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/device.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

namespace kiln::dist {

namespace detail {
class Reducer;
}

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

struct InitOptions {
  /// This process's rank and the number of processes; default: RANK / WORLD_SIZE from the environment (kiln
  /// launch, torchrun), else MPI's (mpirun), else a group of one.
  std::optional<int> rank{}, world_size{};
  /// The rank among the processes of this machine (default LOCAL_RANK, or MPI's local rank, or rank).
  std::optional<int> local_rank{};
  /// Where rank 0 listens for the others when NCCL's id is exchanged without MPI (default MASTER_ADDR or
  /// 127.0.0.1, MASTER_PORT or 29500).
  std::string master_addr{};
  int master_port = 0;
  /// How long joining, a collective or a point-to-point transfer may take before the group fails with
  /// DistError (default KILN_DIST_TIMEOUT seconds from the environment, else 300 s).
  std::optional<std::chrono::milliseconds> timeout{};
  /// The GPU of this rank (default cuda:<local_rank> when the machine has a GPU for every local rank, else the
  /// CPU for every rank: a group mixing GPU and CPU ranks would disagree on its engines and hang).
  std::optional<Device> device{};
  /// Before each collective, check that every rank calls the same one with the same shape, dtype and root
  /// (one small all_gather and a host synchronisation per call: for debugging, as TORCH_DISTRIBUTED_DEBUG);
  /// a mismatch throws ShapeError on every rank, naming the ranks and their operands, instead of a hang or a
  /// wrong result. Default: KILN_DIST_DEBUG (a switch: 1/true/on/yes; docs/environment.md), else off.
  std::optional<bool> check_calls{};
};

class Work {
 public:
  struct Impl;
  Work() = default;  ///< an operation that is already complete
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  /// Whether the operation has finished (never blocks).
  bool is_completed() const;
  /// GPU: the current stream waits for the operation (no host synchronisation). CPU (MPI): blocks until done.
  /// DistError when the operation failed or timed out.
  void wait();
  /// Blocks the host until the operation is done; DistError after the group's timeout (the group is then
  /// aborted: later operations on it throw).
  void synchronize();
  // A GPU collective queued while the current stream is captured into a cuda::Graph becomes part of the graph
  // and runs at every replay (as NCCL allows; every rank must replay its graph, in the same order relative to
  // its other collectives). Its Work orders the capture: call wait() before the capture ends; is_completed(),
  // synchronize() and a wait() after the capture throw ValueError (synchronise the replay's stream instead).
  // The watchdog does not watch captured collectives: a replay that waits for a dead peer is not aborted.

 private:
  std::shared_ptr<Impl> impl_;
};

class ProcessGroup {
 public:
  struct Impl;
  explicit ProcessGroup(InitOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  int local_rank() const;
  /// This rank's GPU (collectives on GPU arrays must use it), or the CPU when the machine has none.
  Device device() const;
  std::chrono::milliseconds timeout() const;
  /// "nccl" for GPU arrays, "mpi" for CPU arrays; DistError naming the fix when the device has no engine here.
  std::string backend(Device d) const;

  /// In place: every rank's `x` becomes the reduction of all ranks' `x` (same shape, dtype, device kind).
  Work all_reduce(Array& x, ReduceOp op = ReduceOp::sum);
  /// In place: every rank's `x` becomes rank `root`'s.
  Work broadcast(Array& x, int root = 0);
  /// `out` (shape (size(), *in.shape)) receives every rank's `in`, in rank order.
  Work all_gather(Array& out, const Array& in);
  /// `in` has shape (size(), *out.shape); rank r's `out` becomes the reduction over ranks of in[r].
  Work reduce_scatter(Array& out, const Array& in, ReduceOp op = ReduceOp::sum);
  /// Sends `x` to rank `dst`, whose matching recv() receives it into an array of the same shape and dtype.
  Work send(const Array& x, int dst);
  Work recv(Array& x, int src);
  /// Returns when every rank has called barrier() (host-side; DistError after the timeout).
  void barrier();
  /// Aborts the communicators: pending and later operations fail with DistError (the watchdog does this
  /// after a timeout).
  void abort(const std::string& reason = "aborted by the program");
  bool aborted() const;

  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// The default process group (torch.distributed.init_process_group). DistError when already initialised.
void init_process_group(InitOptions options = {});
bool is_initialized();
/// The default group; DistError naming init_process_group when there is none.
ProcessGroup& default_group();
/// Destroys the default group (its communicators are freed; MPI itself is finalised at exit).
void destroy_process_group();
/// The default group's rank and size (0 and 1 when there is none, as a single process).
int rank();
int world_size();

/// The default group's operations. Without async_op, wait() is called before returning (GPU: the current
/// stream is ordered after the collective; the host does not block).
Work all_reduce(Array& x, ReduceOp op = ReduceOp::sum, bool async_op = false);
Work broadcast(Array& x, int root = 0, bool async_op = false);
Work all_gather(Array& out, const Array& in, bool async_op = false);
Work reduce_scatter(Array& out, const Array& in, ReduceOp op = ReduceOp::sum, bool async_op = false);
void send(const Array& x, int dst);
void recv(Array& x, int src);
void barrier();

/// The environment variables a process started by `kiln launch`, torchrun or mpirun sees, as kiln reads them.
struct LaunchEnvironment {
  int rank = 0, world_size = 1, local_rank = 0;
  int local_world_size = 0;  ///< ranks on this machine (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE); 0: unknown
  bool from_mpirun = false;    ///< OMPI_COMM_WORLD_* / PMI_* were set
  bool from_launcher = false;  ///< RANK and WORLD_SIZE were set
};
LaunchEnvironment launch_environment();

struct DdpOptions {
  /// Gradients are all-reduced in buckets of about this size, in reverse registration order (the order
  /// backward produces them), each as soon as its last gradient is ready.
  double bucket_cap_mb = 25.0;
  /// A smaller first bucket (the last layers' gradients) starts its all-reduce earlier (PyTorch uses 1 MB).
  /// Default: bucket_cap_mb: on a short step the extra NCCL launch costs more than the earlier start gains, and
  /// a long one does not gain (bench/results/source-comment-figures.md).
  std::optional<double> first_bucket_mb{};
  /// Broadcast buffers (batch-norm running statistics) from rank 0 before every forward, as PyTorch.
  bool broadcast_buffers = true;
};

/// Data-parallel training across processes (torch.nn.parallel.DistributedDataParallel): rank 0's parameters
/// and buffers are broadcast at construction (after checking that every rank has the same parameter names and
/// shapes), and backward all-reduces (averages) the gradients in buckets while it runs, so communication
/// overlaps the rest of backward; after backward() returns, every rank holds the same averaged gradients.
/// Parameters are registered under "module." (state_dict keys as PyTorch's DDP). A whole step (forward,
/// backward with the buckets' copies and all-reduces, optimizer) can be captured in a CUDA graph and replayed:
/// train::TrainStep(ddp, optimizer, {.graph = true}) on every rank (the bucket buffers are allocated at
/// construction, so a replay's all-reduces use the addresses the capture saw).
class DistributedDataParallel : public nn::Module {
 public:
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DdpOptions options = {},
                                   ProcessGroup* group = nullptr);
  ~DistributedDataParallel() override;
  Array forward(const Array& x) override;
  std::string name() const override;
  nn::Module& module() { return *module_; }
  ProcessGroup& group() { return *group_; }

  /// While alive, backward accumulates gradients locally without all-reducing them (gradient accumulation);
  /// the first backward after it all-reduces the accumulated sums.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }
  /// Number of gradient buckets and the parameters of each (by index into parameters()), for inspection.
  std::vector<std::vector<size_t>> buckets() const;

 private:
  std::shared_ptr<nn::Module> module_;
  ProcessGroup* group_;
  DdpOptions options_;
  std::shared_ptr<detail::Reducer> reducer_;
};

/// Data parallel in one process over several GPUs (Chainer's ParallelUpdater, PyTorch's DataParallel without
/// the GIL): one replica per GPU made by `make_model` (replica 0's parameters copied to the others), one host
/// thread per GPU running forward and backward on its slice of the batch, the gradients averaged by NCCL
/// (one communicator per GPU from ncclCommInitAll), and every replica's optimizer stepping, so the replicas
/// stay identical.
class DataParallel {
 public:
  using ModelFactory = std::function<std::shared_ptr<nn::Module>()>;
  using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(nn::Module&)>;
  /// loss(output, target) -> scalar array.
  using LossFn = std::function<Array(const Array&, const Array&)>;
  DataParallel(const ModelFactory& make_model, const OptimizerFactory& make_optimizer, std::vector<Device> devices);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// One training step on a batch (x, y) that lives anywhere: split along the first axis (sizes as
  /// array_split), each slice copied to its GPU, forward + loss + backward per replica concurrently, gradients
  /// averaged over the replicas, each optimizer steps. Returns the mean of the replicas' losses on devices()[0]
  /// (weighted by slice size), without a host synchronisation.
  Array train_step(const Array& x, const Array& y, const LossFn& loss);
  /// Inference: the batch split over the replicas, the outputs concatenated on devices()[0].
  Array forward(const Array& x);
  const std::vector<Device>& devices() const;
  nn::Module& replica(size_t i);
  optim::Optimizer& optimizer(size_t i);
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::dist
