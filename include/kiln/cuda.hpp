// CUDA-only controls: memory statistics and limits of the caching device
// allocator, its cache, and the pinned host memory pool (like
// torch.cuda.memory_stats / cupy's MemoryPool), the TF32 switch of float32
// matmul, and CUDA graphs (like torch.cuda.CUDAGraph / cupy.cuda.Graph). These
// exist only in builds with the CUDA backend (KILN_WITH_CUDA is defined there);
// this header includes no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/device.hpp"
#include "kiln/stream.hpp"

namespace kiln::cuda {

/// A snapshot of one GPU's caching allocator. Byte counts are of blocks as handed out
/// (requests rounded up to 512 bytes) and of segments as obtained from cudaMalloc.
struct MemoryStats {
  size_t allocated = 0;          ///< bytes in blocks handed out to arrays now
  size_t requested = 0;          ///< bytes asked for by those blocks (before rounding)
  size_t reserved = 0;           ///< bytes held from cudaMalloc (allocated + cached)
  size_t peak_allocated = 0;     ///< highest `allocated` since start or reset_peak_memory_stats
  size_t peak_reserved = 0;      ///< highest `reserved` since start or reset_peak_memory_stats
  size_t active_blocks = 0;      ///< blocks handed out now
  size_t cached_blocks = 0;      ///< free blocks kept for reuse (including those waiting for other streams)
  size_t pending_blocks = 0;     ///< free blocks not yet reusable: other streams (record_stream) or CUDA graphs may use them
  size_t segments = 0;           ///< cudaMalloc'd segments held now
  size_t graph_pools = 0;        ///< private memory pools of CUDA graphs alive (see Graph)
  size_t graph_reserved = 0;     ///< bytes of segments owned by those pools (part of `reserved`)
  uint64_t allocations = 0;      ///< allocation requests served
  uint64_t frees = 0;            ///< blocks given back
  uint64_t cache_hits = 0;       ///< allocations served from cached memory without cudaMalloc
  uint64_t device_mallocs = 0;   ///< successful cudaMalloc calls
  uint64_t device_frees = 0;     ///< cudaFree calls (empty_cache, retries after a failed allocation)
  uint64_t alloc_retries = 0;    ///< times the cache was released to retry a failed allocation
  uint64_t ooms = 0;             ///< OutOfMemoryError thrown
};

/// The allocator statistics of GPU `device`. Throws DeviceError for the CPU or a missing GPU.
MemoryStats memory_stats(Device device);
/// Gives every cached, unused segment of GPU `device` back to CUDA (cudaFree); arrays in use are
/// untouched. Waits for blocks still used by other streams first. Throws DeviceError as memory_stats,
/// ValueError while a CUDA graph capture is under way on the device or this thread.
void empty_cache(Device device);
/// Sets peak_allocated/peak_reserved of GPU `device` to the current values.
void reset_peak_memory_stats(Device device);
/// The most bytes the allocator of GPU `device` may reserve (0: no limit beyond the device's memory).
/// Set by KILN_GPU_MEMORY_LIMIT ("2147483648", "2GB" = 2e9, "512MiB" = 512*2^20, "80%" of the GPU's memory)
/// read at the device's first allocation, or by set_memory_limit. Throws ValueError for a malformed variable.
size_t memory_limit(Device device);
/// Sets the reservation limit of GPU `device` in bytes (0: none). Memory already reserved is kept;
/// later allocations that would exceed the limit release the cache, then throw OutOfMemoryError.
void set_memory_limit(Device device, size_t bytes);

/// A snapshot of the pinned (page-locked) host memory pool shared by all GPUs.
struct HostMemoryStats {
  size_t allocated = 0;       ///< bytes in pinned buffers handed out (size classes, not requests)
  size_t reserved = 0;        ///< bytes obtained from cudaHostAlloc
  size_t active_buffers = 0;  ///< buffers handed out now
  size_t cached_buffers = 0;  ///< free buffers kept for reuse (including those waiting for copies)
  uint64_t allocations = 0;   ///< pinned allocations served
  uint64_t cache_hits = 0;    ///< allocations served from a cached buffer
  uint64_t host_allocs = 0;   ///< cudaHostAlloc calls
};

/// Statistics of the pinned host memory pool.
HostMemoryStats host_memory_stats();
/// Frees every cached pinned buffer that no copy uses any more (cudaFreeHost). Throws ValueError on a thread
/// that is capturing a CUDA graph.
void empty_host_cache();

/// Allows TF32 tensor cores for float32 matmul (off by default, like torch.backends.cuda.matmul.allow_tf32):
/// faster, with products rounded to 10 mantissa bits (accumulation stays float32). Process-wide; later calls only.
void set_allow_tf32(bool allow);
/// Whether float32 matmul may use TF32 tensor cores (see set_allow_tf32).
bool allow_tf32();

/// The folder of the on-disk kernel cache (docs/kernels.md): KILN_CACHE_DIR, else $HOME/.cache/kiln/kernels;
/// "" when kernels are cached in memory only (KILN_CACHE_IN_MEMORY set, or neither variable). Reads the
/// environment on every call; throws nothing; needs no GPU.
std::string kernel_cache_directory();

// ---------------------------------------------------------------------------------------------
// CUDA graphs: record a stream's work once, replay it with one launch.
//
//   cuda::Graph g;
//   Stream s = Stream::create(gpu(0));
//   { cuda::GraphCapture capture(g, s);   // kiln ops (and kernels launched on s) are recorded, not run
//     y = x + 1.0f; z = y * 2.0f; }       // the scope's end instantiates the graph
//   g.replay();                           // runs them on s; y and z hold the results of the latest replay
//
// Captured work reads and writes fixed addresses: change inputs in place (assign, copy_from, x += ...),
// never by rebinding the array, and keep input arrays alive while the graph may be replayed. Memory
// allocated during the capture comes from the graph's private pool (see GraphPool). Random ops captured
// (random::uniform/normal/randint on the capturing stream) draw fresh numbers at each replay, as PyTorch's
// graphs do: the capture consumes nothing from the default generator; each replay takes the generator's
// state at that point and advances it by the blocks the graph draws, so replay k gives the bits the k-th
// eager run of the same code would have given (the CPU's bits for uniform and randint), eager draws and
// other graphs interleaved included. Replays of one graph must not overlap (they share its state word).
// Anything that synchronises the host with the capturing stream (item(),
// to_vector(), printing, a copy to pageable host memory, a blocking copy, Stream::synchronize,
// synchronize(device), Event::synchronize) throws ValueError during the capture.

struct GraphPoolState;  // internal

/// The private memory pool of CUDA graphs (an opaque handle, like torch.cuda.graph_pool_handle()). Memory
/// allocated on the capturing stream during a capture comes from it and serves nothing else while the pool
/// lives, so replays write to addresses no other work is given; freed blocks are reused only by later
/// allocations of captures into the same pool. It is released when the last graph using it is reset or
/// destroyed (and the last handle dropped): its memory then returns to the ordinary cache once the replays
/// queued so far are done. Graphs sharing a pool must be replayed in capture order, never concurrently.
class GraphPool {
 public:
  GraphPool() = default;
  /// False for a default-constructed handle (capture then makes a new pool).
  bool defined() const { return state_ != nullptr; }
  /// The GPU whose memory the pool holds. Throws ValueError for an undefined handle.
  Device device() const;

 private:
  friend class Graph;
  explicit GraphPool(std::shared_ptr<GraphPoolState> state) : state_(std::move(state)) {}
  std::shared_ptr<GraphPoolState> state_;
};

/// A captured, instantiated CUDA graph (cudaGraphExec_t) and its memory pool. Move-only.
class Graph {
 public:
  /// An empty graph (no GPU call).
  Graph();
  /// Releases the graph and its pool (see reset); ends a capture still under way, discarding it.
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Starts capturing `stream` (cudaStreamBeginCapture, thread-local mode) and makes it this thread's current
  /// stream and its GPU the current device until capture_end; allocations on it come from `pool` (a new pool
  /// when undefined). Prefer GraphCapture. Throws ValueError for the legacy default stream (CUDA cannot
  /// capture it: create a Stream), for a graph already captured (reset it first) or a pool in use by another
  /// capture; DeviceError for a CPU stream, a missing GPU or a pool of another GPU.
  void capture_begin(const Stream& stream, const GraphPool& pool = {});
  /// Ends the capture (on the thread that began it) and instantiates the graph. Throws ValueError when no
  /// capture is under way, CudaError when CUDA invalidated the capture (an operation it forbids ran) or
  /// instantiation fails; the graph is then empty.
  void capture_end();
  /// Launches the graph on the capture stream (asynchronous, like any kernel launch). With random ops, first
  /// queues a one-thread kernel writing the default generator's state for them and advances the generator (no
  /// synchronisation). Throws ValueError when nothing was captured.
  void replay();
  /// Launches the graph on `stream` (of the graph's GPU): ordered after the work queued there, not after the
  /// capture stream's. Throws ValueError as replay(), DeviceError for a stream of another device.
  void replay(const Stream& stream);
  /// Drops the captured graph and this graph's use of its pool (in-flight replays finish normally). Arrays
  /// created during the capture stay valid. Throws ValueError during a capture.
  void reset();

  /// True between capture_begin and capture_end.
  bool is_capturing() const;
  /// True when a captured graph is ready to replay.
  bool is_ready() const;
  /// Number of nodes (kernels, copies, memsets...) of the captured graph; 0 before a capture.
  size_t num_nodes() const;
  /// The stream captured (valid once capture_begin has run). Throws ValueError before.
  Stream stream() const;
  /// The private pool of this graph, to share with another capture. Throws ValueError before capture_begin.
  GraphPool pool() const;

  struct Impl;  // internal

 private:
  friend class GraphCapture;
  std::unique_ptr<Impl> impl_;
};

/// True when this thread's current stream on `device` is being captured into a graph (false for the CPU).
/// Code that must behave differently inside a capture (an optimizer whose step count would be frozen) asks
/// this; one atomic load when nothing is captured.
bool is_capturing(Device device);

/// RAII capture scope (like `with torch.cuda.graph(g, stream=s)`): capture_begin at construction,
/// capture_end at the end of the scope. When the scope is left by an exception the capture is discarded
/// quietly; otherwise capture_end's errors are thrown from the destructor (which is noexcept(false)).
class GraphCapture {
 public:
  GraphCapture(Graph& graph, const Stream& stream, const GraphPool& pool = {});
  ~GraphCapture() noexcept(false);
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;
  /// Ends the capture before the scope does (capture_end). Throws as capture_end.
  void end();

 private:
  Graph* graph_;
  int exceptions_at_start_;
  bool ended_ = false;
};

}  // namespace kiln::cuda
