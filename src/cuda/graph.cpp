// CUDA graphs (kiln/cuda.hpp): stream capture into a cudaGraph_t, instantiation,
// replay, and the graph's private memory pool.
//
// capture_begin, in this order: the allocator routes allocations on the stream to
// the graph's pool (before capture starts, so no free of this thread can record an
// event on a capturing stream), the thread is counted as capturing (the allocator and
// the pinned pool then skip event queries, and RelaxedCaptureMode lets cudaMalloc and
// module loading through), the capture is registered (so every synchronising path can
// name the capturing stream in its error), the stream and its GPU become current, and
// cudaStreamBeginCapture(cudaStreamCaptureModeThreadLocal) starts recording. capture_end
// undoes it all in reverse, whether cudaStreamEndCapture succeeded or not.
//
// Release: reset() and ~Graph hand the pool back with the streams the graph was replayed
// on; the allocator makes its memory reusable elsewhere only after events on those
// streams. Pinned host buffers of captured copies are kept alive by the graph and, at
// release, marked as used by those streams, for the same reason.
#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.hpp"
#include "core/sync_debug.hpp"
#include "cuda/allocator.hpp"
#include "cuda/pinned.hpp"
#include "cuda/random.hpp"
#include "cuda/runtime.hpp"
#include "kiln/array.hpp"
#include "kiln/cuda.hpp"

namespace kiln::cuda {

/// A private pool of the device allocator and the streams that replayed graphs using it. Shared by the
/// graphs and GraphPool handles that use it; the pool is released with the last of them.
struct GraphPoolState {
  int device = 0;
  cuda_impl::CachingAllocator* allocator = nullptr;
  cuda_impl::PrivatePool* pool = nullptr;
  std::mutex mutex;
  std::vector<cuda_impl::StreamId> streams;

  void add_streams(const std::vector<cudaStream_t>& used) {
    std::lock_guard<std::mutex> lock(mutex);
    for (cudaStream_t s : used)
      if (std::find(streams.begin(), streams.end(), s) == streams.end()) streams.push_back(s);
  }
  ~GraphPoolState() {
    if (!allocator || !pool) return;
    try {
      allocator->release_pool(pool, streams);
    } catch (...) {
      // Out of host memory: the pool's memory stays reserved (never reused while a replay may use it).
    }
  }
};

Device GraphPool::device() const {
  if (!state_) throw ValueError("GraphPool::device: the pool handle is undefined; take one from Graph::pool()");
  return Device{DeviceType::CUDA, state_->device};
}

struct Graph::Impl {
  int device = -1;
  std::optional<Stream> stream;  // the captured stream (kept alive with the graph)
  std::shared_ptr<GraphPoolState> pool;
  cudaGraphExec_t exec = nullptr;
  size_t nodes = 0;
  bool capturing = false;
  std::thread::id capture_thread;
  std::optional<DeviceGuard> device_guard;
  std::optional<StreamGuard> stream_guard;
  std::optional<cuda_impl::ThreadCaptureScope> thread_scope;
  bool registered = false;
  std::vector<std::shared_ptr<Storage>> kept;  // pinned host buffers of captured copies
  detail::GraphRandom random;                  // Philox blocks of the captured draws (0: no random op)
  std::shared_ptr<Storage> random_state;       // the (seed, base offset) word of random.state, from the pool
  std::vector<cudaStream_t> replay_streams;
  cudaStream_t last_replay = nullptr;
  bool replayed = false;

  cudaStream_t handle() const { return static_cast<cudaStream_t>(stream->handle()); }

  // Undoes capture_begin's steps after cudaStreamEndCapture (or when beginning failed midway). Never throws.
  void leave_capture() noexcept {
    if (registered) cuda_impl::unregister_capture(device, handle());
    registered = false;
    thread_scope.reset();
    if (pool) pool->allocator->end_capture(pool->pool, handle());
    stream_guard.reset();
    device_guard.reset();
    capturing = false;
  }

  // Ends a capture whose graph is not wanted (destructor, exception unwinding). Never throws.
  void abandon_capture() noexcept {
    if (!capturing) return;
    cudaGraph_t graph = nullptr;
    try {
      cuda_impl::set_device(device);
    } catch (...) {
    }
    if (cudaStreamEndCapture(handle(), &graph) != cudaSuccess) (void)cudaGetLastError();
    if (graph) (void)cudaGraphDestroy(graph);
    leave_capture();
    release();
  }

  // Drops the executable graph, the pool and the kept host buffers. Never throws.
  void release() noexcept {
    if (exec) {
      // An in-flight launch is not cut short: CUDA frees the graph once it completes.
      if (cudaGraphExecDestroy(exec) != cudaSuccess) (void)cudaGetLastError();
      exec = nullptr;
    }
    nodes = 0;
    for (auto& storage : kept) {
      for (cudaStream_t s : replay_streams) {
        try {
          cuda_impl::PinnedPool::instance().record_use(storage->data(), device, s);
        } catch (...) {
        }
      }
    }
    kept.clear();
    random = detail::GraphRandom{};
    random_state.reset();  // a block of the pool: given back before the pool
    if (pool) {
      try {
        std::vector<cudaStream_t> used = replay_streams;
        if (stream) used.push_back(handle());
        pool->add_streams(used);
      } catch (...) {
        // Out of host memory: the pool is still released; blocks on other streams may be reused early.
      }
      pool.reset();
    }
    replay_streams.clear();
    replayed = false;
  }
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}

Graph::~Graph() {
  if (!impl_) return;
  impl_->abandon_capture();
  impl_->release();
}

Graph::Graph(Graph&&) noexcept = default;

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (impl_) {
      impl_->abandon_capture();
      impl_->release();
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

namespace {
Graph::Impl& impl_of(const std::unique_ptr<Graph::Impl>& impl, const char* op) {
  if (!impl) throw ValueError(std::string(op) + ": this Graph was moved from; use the graph it was moved to");
  return *impl;
}
}  // namespace

void Graph::capture_begin(const Stream& stream, const GraphPool& pool) {
  Impl& g = impl_of(impl_, "Graph::capture_begin");
  const Device d = stream.device();
  if (d.is_cpu())
    throw DeviceError("Graph::capture_begin: CUDA graphs capture GPU work, but " + stream.str() +
                      " is a CPU stream; pass a stream of a GPU, e.g. Stream::create(gpu(0))");
  if (stream.handle() == nullptr)
    throw ValueError("Graph::capture_begin: the default (legacy) stream of " + d.str() +
                     " cannot be captured (CUDA forbids it); create a stream and capture that: "
                     "Stream s = Stream::create(" +
                     d.str() + "); cuda::GraphCapture capture(graph, s)");
  cuda_impl::check_device(d.index, "Graph::capture_begin");
  if (g.capturing) throw ValueError("Graph::capture_begin: this graph is already capturing; end that capture first");
  if (g.exec)
    throw ValueError(
        "Graph::capture_begin: this graph already holds a captured graph; call reset() before "
        "capturing again, or capture into a new Graph");
  if (pool.defined() && pool.state_->device != d.index)
    throw DeviceError("Graph::capture_begin: the memory pool is on cuda:" + std::to_string(pool.state_->device) +
                      " but the stream is on " + d.str() + "; share pools only between graphs of one GPU");
  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  std::shared_ptr<GraphPoolState> state = pool.state_;
  if (!state) {
    state = std::make_shared<GraphPoolState>();
    state->device = d.index;
    state->allocator = &cuda_impl::device_allocator(d.index);
    state->pool = state->allocator->create_pool();
  }
  state->allocator->begin_capture(state->pool, cuda_stream);  // throws for a pool another capture uses
  g.device = d.index;
  g.stream.emplace(stream);
  g.pool = std::move(state);
  g.capturing = true;
  g.capture_thread = std::this_thread::get_id();
  try {
    g.thread_scope.emplace();
    // The (seed, base offset) word of captured random draws comes first from the graph's pool. Each replay
    // writes it before the graph starts, so it must not share memory with a block that an earlier node of the
    // graph uses and frees: a word carved from such a block later in the capture would be overwritten by that
    // node mid-replay, and the draws after it would read a wrong seed (replays then differ from eager runs).
    g.random_state = cuda_impl::device_alloc(d.index, 2 * sizeof(uint64_t), cuda_stream);
    g.random.state = g.random_state->data();
    cuda_impl::register_capture(d.index, cuda_stream, &g.kept, &g.random);
    g.registered = true;
    g.device_guard.emplace(d);
    g.stream_guard.emplace(stream);
    cuda_impl::set_device(d.index);
    KILN_CUDA_CHECK(cudaStreamBeginCapture(cuda_stream, cudaStreamCaptureModeThreadLocal));
  } catch (...) {
    g.leave_capture();
    g.release();
    throw;
  }
}

void Graph::capture_end() {
  Impl& g = impl_of(impl_, "Graph::capture_end");
  if (!g.capturing) throw ValueError("Graph::capture_end: no capture is under way; call capture_begin first");
  if (g.capture_thread != std::this_thread::get_id())
    throw ValueError("Graph::capture_end: the capture of " + g.stream->str() +
                     " was begun on another thread; end it on that thread (CUDA's thread-local capture mode)");
  cuda_impl::set_device(g.device);
  cudaGraph_t graph = nullptr;
  const cudaError_t end_err = cudaStreamEndCapture(g.handle(), &graph);
  g.leave_capture();
  if (end_err != cudaSuccess || graph == nullptr) {
    g.release();
    if (end_err == cudaErrorStreamCaptureInvalidated || end_err == cudaErrorStreamCaptureUnjoined ||
        end_err == cudaErrorStreamCaptureUnmatched) {
      (void)cudaGetLastError();
      throw CudaError(std::string("Graph::capture_end: CUDA invalidated the capture of ") +
                      cuda_impl::stream_name(g.device, g.handle()) + ": " + cudaGetErrorName(end_err) + " (" +
                      cudaGetErrorString(end_err) +
                      "). An operation CUDA forbids during capture ran (a synchronisation or query, work on the "
                      "legacy default stream, a stream forked from the capture and never joined back); the graph is "
                      "empty: capture again without it");
    }
    cuda_impl::throw_cuda_error(end_err == cudaSuccess ? cudaErrorUnknown : end_err, "cudaStreamEndCapture", __FILE__,
                                __LINE__);
  }
  size_t count = 0;
  cudaError_t err = cudaGraphGetNodes(graph, nullptr, &count);
  if (err == cudaSuccess) err = cudaGraphInstantiate(&g.exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // the executable graph is independent of it
  if (err != cudaSuccess) {
    g.exec = nullptr;
    g.release();
    cuda_impl::throw_cuda_error(err, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  g.nodes = count;
  // Uploading now moves the first replay's setup work out of it (asynchronous, on the capture stream).
  if (cudaGraphUpload(g.exec, g.handle()) != cudaSuccess) (void)cudaGetLastError();
}

namespace {
void require_ready(const Graph::Impl& g) {
  if (g.exec) return;
  if (g.capturing)
    throw ValueError("Graph::replay: the graph is still capturing; end the capture (the GraphCapture scope) first");
  throw ValueError(
      "Graph::replay: nothing was captured (or the graph was reset); record work first: "
      "{ cuda::GraphCapture capture(graph, stream); ... }");
}

// Before a replay of a graph with random draws: its (seed, base offset) word gets the default generator's state,
// which advances by the blocks the graph draws, so replay k draws what the k-th eager run would have. The word
// is written by a kernel queued on the replay stream (values as arguments): ordered, no host synchronisation.
// A replay captured into another graph takes its blocks from that graph's word instead, at run time.
void write_random_state(Graph::Impl& g, cudaStream_t stream) {
  const void* source = nullptr;
  random::GeneratorState state;
  if (detail::GraphRandom* outer = cuda_impl::capture_random(g.device, stream)) {
    source = outer->state;
    state.offset = outer->blocks;
    outer->blocks += g.random.blocks;
  } else {
    state = detail::reserve_random_blocks(g.random.blocks);
  }
  cuda_impl::write_graph_random_state(g.device, g.random_state->data(), source, state.seed, state.offset, stream);
}
}  // namespace

void Graph::replay() {
  Impl& g = impl_of(impl_, "Graph::replay");
  require_ready(g);
  replay(*g.stream);
}

void Graph::replay(const Stream& stream) {
  Impl& g = impl_of(impl_, "Graph::replay");
  require_ready(g);
  if (stream.device() != Device{DeviceType::CUDA, g.device})
    throw DeviceError("Graph::replay: the graph was captured on cuda:" + std::to_string(g.device) +
                      " but the stream is on " + stream.device().str() +
                      "; replay it on a stream of cuda:" + std::to_string(g.device));
  auto s = static_cast<cudaStream_t>(stream.handle());
  if (!g.replayed || s != g.last_replay) {
    if (std::find(g.replay_streams.begin(), g.replay_streams.end(), s) == g.replay_streams.end())
      g.replay_streams.push_back(s);
    g.last_replay = s;
    g.replayed = true;
  }
  cuda_impl::set_device(g.device);
  detail::note_gpu_work(g.device);  // kiln::bench finds the GPU a replay runs on, as for any op
  if (g.random.blocks > 0) write_random_state(g, s);
  KILN_CUDA_CHECK(cudaGraphLaunch(g.exec, s));
}

void Graph::reset() {
  Impl& g = impl_of(impl_, "Graph::reset");
  if (g.capturing)
    throw ValueError("Graph::reset: the graph is capturing; end the capture (the GraphCapture scope) first");
  g.release();
}

bool is_capturing(Device device) {
  if (!device.is_cuda() || !cuda_impl::any_capture()) return false;
  return cuda_impl::stream_is_capturing(device.index, cuda_impl::current_stream(device.index));
}

bool Graph::is_capturing() const { return impl_ && impl_->capturing; }
bool Graph::is_ready() const { return impl_ && impl_->exec != nullptr; }
size_t Graph::num_nodes() const { return impl_ ? impl_->nodes : 0; }

Stream Graph::stream() const {
  const Impl& g = impl_of(impl_, "Graph::stream");
  if (!g.stream) throw ValueError("Graph::stream: nothing was captured yet; the stream is set by capture_begin");
  return *g.stream;
}

GraphPool Graph::pool() const {
  const Impl& g = impl_of(impl_, "Graph::pool");
  if (!g.pool)
    throw ValueError("Graph::pool: this graph has no memory pool (nothing captured, or reset); capture first");
  return GraphPool(g.pool);
}

GraphCapture::GraphCapture(Graph& graph, const Stream& stream, const GraphPool& pool)
    : graph_(&graph), exceptions_at_start_(std::uncaught_exceptions()) {
  graph.capture_begin(stream, pool);
}

void GraphCapture::end() {
  if (ended_) throw ValueError("GraphCapture::end: the capture has already ended");
  ended_ = true;
  graph_->capture_end();
}

GraphCapture::~GraphCapture() noexcept(false) {
  if (ended_) return;
  ended_ = true;
  if (std::uncaught_exceptions() > exceptions_at_start_) {
    // Leaving the scope by an exception: discard the capture (not instantiated) without throwing a second one.
    if (graph_->impl_) graph_->impl_->abandon_capture();
    return;
  }
  graph_->capture_end();
}

}  // namespace kiln::cuda
