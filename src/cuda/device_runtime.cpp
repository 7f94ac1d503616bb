// The CUDA device runtime: kiln's DeviceRuntime on CUDA GPUs. Allocation goes to
// the per-device caching allocator (pinned host memory to the pinned pool),
// transfers to cudaMemcpyAsync / cudaMemcpyPeerAsync on the right stream,
// streams and events to the runtime API. Every entry point first makes the
// device current for this thread: an array's work runs on its own GPU,
// whatever kiln's current device is.
//
// Pageable host memory: small copies go through the CUDA driver (cudaMemcpyAsync,
// which stages them itself); larger ones (from 8 MiB host->device, 1 MiB
// device->host) through two pinned chunks of the pinned pool, double-buffered
// with events, so that the host-side memcpy of one chunk (on a few threads)
// overlaps the DMA of the other: the driver copies pageable memory on one thread
// through small staging buffers, several times slower for large copies; below the
// thresholds the two paths tie (bench/results/source-comment-figures.md).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <omp.h>

#include "core/device_runtime.hpp"
#include "core/sync_debug.hpp"
#include "cuda/allocator.hpp"
#include "cuda/ops.hpp"  // raise_device_errors: a failed device check is thrown at each synchronisation
#include "cuda/pinned.hpp"
#include "cuda/runtime.hpp"

namespace kiln::cuda_impl {

namespace {

cudaStream_t native(const Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

constexpr size_t kStagingChunk = size_t{32} << 20;  // two of these per pageable copy
// Smaller pageable copies go through the driver: below these sizes staging gains nothing (see above).
constexpr size_t kStagedMinimumToDevice = size_t{8} << 20;
constexpr size_t kStagedMinimumToHost = size_t{1} << 20;

bool use_staging(size_t nbytes, bool to_device) {
  return nbytes >= (to_device ? kStagedMinimumToDevice : kStagedMinimumToHost);
}

// memcpy between pageable and pinned host memory, split over a few threads for large chunks: one
// core cannot saturate host memory bandwidth (nor PCIe), and page faults of fresh pageable memory
// are served in parallel.
void host_copy(void* dst, const void* src, size_t len) {
  constexpr size_t kPiece = size_t{4} << 20;
  int threads = static_cast<int>(std::min<size_t>(len / kPiece, 8));
  threads = std::min(threads, omp_get_max_threads());
  if (threads <= 1) {
    std::memcpy(dst, src, len);
    return;
  }
  size_t per = (len + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  per = (per + 4095) / 4096 * 4096;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    size_t begin = static_cast<size_t>(t) * per;
    if (begin < len)
      std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, std::min(per, len - begin));
  }
}

// Two pinned staging chunks and their events; the chunks go back to the pool (kept until the
// stream's work on them is done) and the events to their pool whatever happens.
class StagingBuffers {
 public:
  StagingBuffers(int device, cudaStream_t stream, size_t chunk) : device_(device), stream_(stream) {
    PinnedPool& pool = PinnedPool::instance();
    for (int b = 0; b < 2; ++b) {
      buffers_[b] = static_cast<char*>(pool.allocate(chunk));
      events_[b] = acquire_event(device);
    }
  }
  ~StagingBuffers() {
    PinnedPool& pool = PinnedPool::instance();
    for (int b = 0; b < 2; ++b) {
      if (buffers_[b]) {
        try {
          pool.record_use(buffers_[b], device_, stream_);
        } catch (...) {
        }
        pool.free(buffers_[b]);
      }
      release_event(device_, events_[b]);
    }
  }
  StagingBuffers(const StagingBuffers&) = delete;
  StagingBuffers& operator=(const StagingBuffers&) = delete;
  char* buffer(int b) const { return buffers_[b]; }
  cudaEvent_t event(int b) const { return events_[b]; }

 private:
  int device_;
  cudaStream_t stream_;
  char* buffers_[2] = {nullptr, nullptr};
  cudaEvent_t events_[2] = {nullptr, nullptr};
};

void staged_host_to_device(char* dst, const char* src, size_t n, int device, cudaStream_t stream) {
  size_t chunk = std::min(n, kStagingChunk);
  StagingBuffers staging(device, stream, chunk);
  bool in_flight[2] = {false, false};
  for (size_t offset = 0, k = 0; offset < n; offset += chunk, ++k) {
    int b = static_cast<int>(k & 1);
    size_t len = std::min(chunk, n - offset);
    if (in_flight[b]) KILN_CUDA_CHECK(cudaEventSynchronize(staging.event(b)));  // its last DMA is done
    host_copy(staging.buffer(b), src + offset, len);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst + offset, staging.buffer(b), len, cudaMemcpyHostToDevice, stream));
    KILN_CUDA_CHECK(cudaEventRecord(staging.event(b), stream));
    in_flight[b] = true;
  }
}

void staged_device_to_host(char* dst, const char* src, size_t n, cudaStream_t stream, int device) {
  size_t chunk = std::min(n, kStagingChunk);
  StagingBuffers staging(device, stream, chunk);
  size_t chunks = (n + chunk - 1) / chunk;
  auto issue = [&](size_t k) {
    int b = static_cast<int>(k & 1);
    size_t offset = k * chunk, len = std::min(chunk, n - offset);
    KILN_CUDA_CHECK(cudaMemcpyAsync(staging.buffer(b), src + offset, len, cudaMemcpyDeviceToHost, stream));
    KILN_CUDA_CHECK(cudaEventRecord(staging.event(b), stream));
  };
  issue(0);
  if (chunks > 1) issue(1);
  for (size_t k = 0; k < chunks; ++k) {
    int b = static_cast<int>(k & 1);
    size_t offset = k * chunk, len = std::min(chunk, n - offset);
    KILN_CUDA_CHECK(cudaEventSynchronize(staging.event(b)));
    host_copy(dst + offset, staging.buffer(b), len);
    if (k + 2 < chunks) issue(k + 2);
  }
}

// Makes `waiter` wait for the work queued so far on `signaller` (streams of any devices).
void stream_wait(int waiter_device, cudaStream_t waiter, int signaller_device, cudaStream_t signaller) {
  if (waiter_device == signaller_device && waiter == signaller) return;
  set_device(signaller_device);
  cudaEvent_t event = acquire_event(signaller_device);
  cudaError_t err = cudaEventRecord(event, signaller);
  if (err == cudaSuccess) {
    set_device(waiter_device);
    err = cudaStreamWaitEvent(waiter, event, 0);  // captures the record: the event may be reused at once
  }
  release_event(signaller_device, event);
  if (err != cudaSuccess) throw_cuda_error(err, "cudaEventRecord/cudaStreamWaitEvent", __FILE__, __LINE__);
}

// CUDA graphs: throws the clear ValueError of runtime.hpp when work on `stream` of `device` would be captured
// (or would break a capture: the legacy default stream); `action` says what cannot happen ("Stream::synchronize
// cannot synchronise"). One atomic load when nothing is captured.
void refuse_during_capture(const char* action, int device, cudaStream_t stream) {
  if (!any_capture() || !stream_is_capturing(device, stream)) return;
  throw_during_capture(action, device, stream ? stream : capturing_stream(device));
}

// As refuse_during_capture for calls CUDA forbids to a capturing thread whatever the stream (event waits).
void refuse_on_capturing_thread(const char* action, int device) {
  if (thread_captures() == 0) return;
  if (cudaStream_t s = thread_capturing_stream(device)) throw_during_capture(action, device, s);
}

void sync_stream(int device, cudaStream_t stream) {
  set_device(device);
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

class CudaRuntime final : public detail::DeviceRuntime {
 public:
  std::shared_ptr<Storage> allocate(int64_t nbytes, Device device, const ArrayOptions& options) override {
    if (nbytes < 0) throw ValueError("allocate: negative size " + std::to_string(nbytes));
    if (device.is_cpu()) {
      if (options.pinned) return pinned_alloc(static_cast<size_t>(nbytes));
      return detail::builtin_runtime(DeviceType::CPU)->allocate(nbytes, device, options);
    }
    check_device(device.index, "allocate");
    set_device(device.index);
    return device_alloc(device.index, static_cast<size_t>(nbytes), cuda_impl::current_stream(device.index));
  }

  void transfer(const Array& src, const Array& dst, const Stream* stream, bool non_blocking) override;

  void synchronize(Device device) override {
    check_device(device.index, "synchronize");
    if (cudaStream_t s = capturing_stream(device.index))
      throw_during_capture("synchronize(" + device.str() + ") cannot wait for the device", device.index, s);
    set_device(device.index);
    KILN_CUDA_CHECK(cudaDeviceSynchronize());
    raise_device_errors(device.index);
  }
  int device_count() override { return cuda_impl::device_count(); }
  DeviceProperties properties(Device device) override;

  void* stream_create(Device device, const StreamOptions& options) override;
  void stream_destroy(Device device, void* stream) override;
  void* current_stream(Device device) override { return cuda_impl::current_stream(device.index); }
  void set_current_stream(Device device, void* stream) override {
    cuda_impl::set_current_stream(device.index, static_cast<cudaStream_t>(stream));
  }
  void stream_synchronize(Device device, void* stream) override {
    refuse_during_capture("Stream::synchronize cannot synchronise", device.index, static_cast<cudaStream_t>(stream));
    sync_stream(device.index, static_cast<cudaStream_t>(stream));
    raise_device_errors(device.index);
  }
  bool stream_query(Device device, void* stream) override {
    refuse_during_capture("Stream::query cannot query a stream", device.index, static_cast<cudaStream_t>(stream));
    set_device(device.index);
    return completed(cudaStreamQuery(static_cast<cudaStream_t>(stream)), "cudaStreamQuery");
  }
  void* event_create(Device device, bool timing) override {
    set_device(device.index);
    cudaEvent_t event = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
    return event;
  }
  void event_destroy(Device device, void* event) override {
    // Called from a shared_ptr deleter: never throws. A pending event is released by CUDA when done.
    try {
      set_device(device.index);
    } catch (...) {
      return;  // CUDA is unusable (or unloading): nothing to give back
    }
    if (cudaEventDestroy(static_cast<cudaEvent_t>(event)) != cudaSuccess) (void)cudaGetLastError();
  }
  void event_record(Device device, void* event, void* stream) override {
    set_device(device.index);
    KILN_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
  }
  void event_wait(Device device, void* event, void* stream) override {
    set_device(device.index);
    KILN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
  }
  void event_synchronize(Device device, void* event) override {
    refuse_on_capturing_thread("Event::synchronize cannot wait for an event", device.index);
    set_device(device.index);
    KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
    raise_device_errors(device.index);
  }
  bool event_query(Device device, void* event) override {
    refuse_on_capturing_thread("Event::query cannot query an event", device.index);
    set_device(device.index);
    return completed(cudaEventQuery(static_cast<cudaEvent_t>(event)), "cudaEventQuery");
  }
  float event_elapsed_ms(Device device, void* start, void* end) override {
    refuse_on_capturing_thread("Event::elapsed_ms cannot wait for an event", device.index);
    set_device(device.index);
    KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(end)));
    float ms = 0.0f;
    cudaError_t err = cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(start)));
      err = cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end));
    }
    if (err == cudaErrorInvalidResourceHandle) {
      (void)cudaGetLastError();
      throw ValueError("Event::elapsed_ms: CUDA refused to time these events on " + device.str() +
                       " (one was created with timing disabled, or recorded on another device); create both with "
                       "Event::create(device, /*timing=*/true) and record them on streams of that device");
    }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaEventElapsedTime", __FILE__, __LINE__);
    raise_device_errors(device.index);
    return ms;
  }
  void record_stream(const Array& a, void* stream) override {
    cuda_impl::record_stream(*a.storage(), static_cast<cudaStream_t>(stream));
  }

 private:
  static bool completed(cudaError_t err, const char* call) {
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    throw_cuda_error(err, call, __FILE__, __LINE__);
  }

  // `given`: the caller's stream (the default stream included), nullptr for the current stream.
  void copy_device_to_device(const Array& src, const Array& dst, size_t n, const Stream* given);
  void copy_host_to_device(const Array& src, const Array& dst, size_t n, const Stream* given, bool non_blocking);
  void copy_device_to_host(const Array& src, const Array& dst, size_t n, const Stream* given, bool non_blocking);

  // Destroyed streams are kept and handed out again (same flags and priority) instead of
  // cudaStreamDestroy: caches keyed by a stream handle (the allocator's pools, pinned buffers' uses)
  // can then never see a dangling handle, and stream creation is cheap after warm-up.
  std::mutex streams_mutex_;
  std::vector<std::tuple<int, unsigned, int, cudaStream_t>> idle_streams_;  // device, flags, priority, stream
  std::vector<std::tuple<cudaStream_t, unsigned, int>> stream_keys_;        // stream -> flags, priority
};

DeviceProperties CudaRuntime::properties(Device device) {
  int i = device.index;
  check_device(i, "device_properties");
  cudaDeviceProp p{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&p, i));
  DeviceProperties out;
  out.name = p.name;
  out.major = p.major;
  out.minor = p.minor;
  out.total_memory = p.totalGlobalMem;
  set_device(i);
  size_t free_bytes = 0, total_bytes = 0;
  KILN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  out.free_memory = free_bytes;
  out.multiprocessors = p.multiProcessorCount;
  out.l2_cache_bytes = p.l2CacheSize > 0 ? static_cast<size_t>(p.l2CacheSize) : 0;
  out.shared_memory_per_block = p.sharedMemPerBlock;
  out.warp_size = p.warpSize;
  // CUDA 13 dropped memoryClockRate from cudaDeviceProp; the attribute may still report it (kHz).
  int clock_khz = 0, bus_bits = p.memoryBusWidth;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i) != cudaSuccess) {
    (void)cudaGetLastError();
    clock_khz = 0;
  }
  if (clock_khz > 0 && bus_bits > 0)  // double data rate: two transfers per clock
    out.memory_bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  int sm_khz = 0;  // CUDA 13 dropped clockRate from cudaDeviceProp too
  if (cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, i) != cudaSuccess) {
    (void)cudaGetLastError();
    sm_khz = 0;
  }
  out.clock_mhz = sm_khz / 1000;
  return out;
}

void* CudaRuntime::stream_create(Device device, const StreamOptions& options) {
  int i = device.index;
  check_device(i, "Stream::create");
  set_device(i);
  int least = 0, greatest = 0;  // e.g. 0 and -5: numerically lower is a higher priority
  KILN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  int priority = std::clamp(options.priority, std::min(least, greatest), std::max(least, greatest));
  unsigned flags = options.non_blocking ? cudaStreamNonBlocking : cudaStreamDefault;
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    for (auto it = idle_streams_.begin(); it != idle_streams_.end(); ++it) {
      auto [d, f, p, s] = *it;
      if (d == i && f == flags && p == priority) {
        idle_streams_.erase(it);
        return s;
      }
    }
  }
  cudaStream_t stream = nullptr;
  KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, flags, priority));
  std::lock_guard<std::mutex> lock(streams_mutex_);
  stream_keys_.emplace_back(stream, flags, priority);
  return stream;
}

void CudaRuntime::stream_destroy(Device device, void* handle) {
  // Called from a shared_ptr deleter: never throws.
  auto stream = static_cast<cudaStream_t>(handle);
  if (cuda_impl::current_stream(device.index) == stream) cuda_impl::set_current_stream(device.index, nullptr);
  try {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    for (const auto& [s, flags, priority] : stream_keys_)
      if (s == stream) {
        idle_streams_.emplace_back(device.index, flags, priority, stream);
        return;
      }
  } catch (...) {
  }
}

void CudaRuntime::transfer(const Array& src, const Array& dst, const Stream* stream, bool non_blocking) {
  if (src.dtype() != dst.dtype() || src.size() != dst.size() || !src.is_contiguous() || !dst.is_contiguous())
    throw ValueError("transfer: needs contiguous arrays of one dtype and size, got " + shape_str(src.shape()) + " " +
                     std::string(dtype_name(src.dtype())) + " on " + src.device().str() + " and " + shape_str(dst.shape()) + " " +
                     std::string(dtype_name(dst.dtype())) + " on " + dst.device().str() + "; use Array::to(), which prepares them");
  Device s = src.device(), d = dst.device();
  if (s.is_cuda()) check_device(s.index, "to");
  if (d.is_cuda()) check_device(d.index, "to");
  auto n = static_cast<size_t>(src.nbytes());
  if (n == 0) return;
  // Sync accounting first: in error mode an implicit synchronisation throws before anything is copied.
  // Pageable host memory always makes the host wait (staging), so it counts as a synchronisation.
  if (s.is_cuda() && d.is_cuda()) {
    detail::note_copy(detail::CopyDirection::DeviceToDevice, n, s, false);
  } else if (s.is_cpu() && d.is_cuda()) {
    detail::note_copy(detail::CopyDirection::HostToDevice, n, d, !non_blocking || !src.is_pinned());
  } else if (s.is_cuda()) {
    detail::note_copy(detail::CopyDirection::DeviceToHost, n, s, !non_blocking || !dst.is_pinned());
  }
  if (s.is_cuda()) detail::note_gpu_work(s.index);
  if (d.is_cuda()) detail::note_gpu_work(d.index);
  if (s.is_cpu() && d.is_cpu()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), n);
  } else if (s.is_cuda() && d.is_cuda()) {
    copy_device_to_device(src, dst, n, stream);
  } else if (s.is_cpu()) {
    copy_host_to_device(src, dst, n, stream, non_blocking);
  } else {
    copy_device_to_host(src, dst, n, stream, non_blocking);
  }
}

void CudaRuntime::copy_device_to_device(const Array& src, const Array& dst, size_t n, const Stream* given) {
  int from = src.device().index, to = dst.device().index;
  if (from == to) {
    cudaStream_t stream = given ? native(*given) : cuda_impl::current_stream(from);
    set_device(from);  // a copy within one GPU is captured like a kernel
    cuda_impl::record_stream(*src.storage(), stream);
    cuda_impl::record_stream(*dst.storage(), stream);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  // Between GPUs: the copy runs on the given stream (of either GPU) or on the source's current stream.
  // A two-way barrier with the other GPU's current stream orders it after the work queued there so
  // far (which may still use dst) and orders that stream's later work after the copy.
  const int copy_device = given ? given->device().index : from;
  const cudaStream_t copy_stream = given ? native(*given) : cuda_impl::current_stream(from);
  int other_device = copy_device == from ? to : from;
  cudaStream_t other_stream = cuda_impl::current_stream(other_device);
  if (any_capture() && (stream_is_capturing(copy_device, copy_stream) || stream_is_capturing(other_device, other_stream)))
    throw ValueError("to/copy_from: a copy between " + src.device().str() + " and " + dst.device().str() +
                     " cannot be captured in a CUDA graph (its barrier with the other GPU's stream would pull that "
                     "stream into the capture); copy between GPUs before or after the capture");
  stream_wait(copy_device, copy_stream, other_device, other_stream);
  bool peer = enable_peer_access(from, to) && enable_peer_access(to, from);
  set_device(copy_device);
  if (peer)
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToDevice, copy_stream));
  else  // no peer access: the driver stages the copy through host memory
    KILN_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), to, src.data_ptr(), from, n, copy_stream));
  stream_wait(other_device, other_stream, copy_device, copy_stream);
  // Each block is now used by its own GPU's stream of the pair; tell the allocator when that is
  // not the stream it was allocated on.
  cuda_impl::record_stream(*src.storage(), from == copy_device ? copy_stream : other_stream);
  cuda_impl::record_stream(*dst.storage(), to == copy_device ? copy_stream : other_stream);
}

void CudaRuntime::copy_host_to_device(const Array& src, const Array& dst, size_t n, const Stream* given,
                                      bool non_blocking) {
  int device = dst.device().index;
  cudaStream_t stream = given ? native(*given) : cuda_impl::current_stream(device);
  set_device(device);
  if (any_capture() && stream_is_capturing(device, stream)) {
    if (!src.is_pinned())
      throw ValueError("to/copy_from: a copy from pageable host memory to " + dst.device().str() +
                       " cannot be captured in a CUDA graph (CUDA reads pageable memory when the copy is queued, not "
                       "when the graph replays); copy from pinned memory (pin_memory() or empty(..., {.pinned = "
                       "true})) with {.non_blocking = true}, or copy before the capture");
    if (!non_blocking)
      throw_during_capture("a blocking copy to " + dst.device().str() +
                               " (to/copy_from without {.non_blocking = true}) cannot synchronise",
                           device, stream ? stream : capturing_stream(device));
    keep_for_capture(device, stream, src.storage());  // every replay reads it: the graph keeps it alive
  }
  cuda_impl::record_stream(*dst.storage(), stream);
  auto* out = static_cast<char*>(dst.data_ptr());
  const auto* in = static_cast<const char*>(src.data_ptr());
  if (src.is_pinned()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(out, in, n, cudaMemcpyHostToDevice, stream));
    PinnedPool::instance().record_use(src.storage()->data(), device, stream);
  } else if (use_staging(n, /*to_device=*/true)) {
    staged_host_to_device(out, in, n, device, stream);
  } else {
    // From pageable memory the driver returns once the source has been staged: it may be reused.
    KILN_CUDA_CHECK(cudaMemcpyAsync(out, in, n, cudaMemcpyHostToDevice, stream));
  }
  if (!non_blocking) {
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    raise_device_errors(device);
  }
}

void CudaRuntime::copy_device_to_host(const Array& src, const Array& dst, size_t n, const Stream* given,
                                      bool non_blocking) {
  int device = src.device().index;
  cudaStream_t stream = given ? native(*given) : cuda_impl::current_stream(device);
  set_device(device);
  if (any_capture() && stream_is_capturing(device, stream)) {
    if (!dst.is_pinned() || !non_blocking)
      throw_during_capture("item(), to_vector(), printing and to(cpu()) (a copy from " + src.device().str() +
                               " to pageable host memory, or any copy to the host without {.non_blocking = true}) "
                               "cannot synchronise",
                           device, stream ? stream : capturing_stream(device));
    keep_for_capture(device, stream, dst.storage());  // every replay writes it: the graph keeps it alive
  }
  cuda_impl::record_stream(*src.storage(), stream);
  auto* out = static_cast<char*>(dst.data_ptr());
  const auto* in = static_cast<const char*>(src.data_ptr());
  if (dst.is_pinned()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(out, in, n, cudaMemcpyDeviceToHost, stream));
    PinnedPool::instance().record_use(dst.storage()->data(), device, stream);
    if (!non_blocking) {
      KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
      raise_device_errors(device);
    }
  } else if (use_staging(n, /*to_device=*/false)) {
    staged_device_to_host(out, in, n, stream, device);  // complete on return
    raise_device_errors(device);
  } else {
    KILN_CUDA_CHECK(cudaMemcpyAsync(out, in, n, cudaMemcpyDeviceToHost, stream));
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));  // a pageable destination is only valid once done
    raise_device_errors(device);
  }
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::detail {
DeviceRuntime& cuda_runtime() {
  // Leaked on purpose: Stream/Event owners and Storage deleters may call it during static destruction.
  static auto* runtime = new cuda_impl::CudaRuntime();
  return *runtime;
}
}  // namespace kiln::detail
