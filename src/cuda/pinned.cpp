// The pinned host memory pool (see pinned.hpp) and the public host-memory API
// of kiln/cuda.hpp.
#include "cuda/pinned.hpp"

#include <algorithm>
#include <bit>
#include <string>

#include "cuda/allocator.hpp"
#include "cuda/runtime.hpp"
#include "kiln/array.hpp"

namespace kiln::cuda_impl {

PinnedPool& PinnedPool::instance() {
  static PinnedPool* pool = new PinnedPool();  // leaked on purpose (see pinned.hpp)
  return *pool;
}

size_t PinnedPool::size_class(size_t bytes) {
  constexpr size_t kMinimum = 4096;
  if (bytes <= kMinimum) return kMinimum;
  size_t base = std::bit_floor(bytes);
  if (base == bytes) return bytes;
  size_t quarter = base / 4;
  for (size_t c = base + quarter; c < 2 * base; c += quarter)
    if (c >= bytes) return c;
  return 2 * base;
}

void PinnedPool::cache(Buffer* buffer) {
  buffer->uses.clear();
  free_[buffer->capacity].push_back(buffer);
}

void PinnedPool::process_events() {
  for (size_t i = 0; i < pending_.size();) {
    Pending p = pending_[i];
    cudaError_t err = cudaEventQuery(p.event);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      ++i;
      continue;
    }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaEventQuery", __FILE__, __LINE__);
    pending_[i] = pending_.back();
    pending_.pop_back();
    release_event(p.device, p.event);
    if (--p.buffer->pending_events == 0) {
      pending_buffers_--;
      if (!p.buffer->leaked) cache(p.buffer);
    }
  }
}

void PinnedPool::release_free_buffers() {
  for (auto& [capacity, list] : free_) {
    for (Buffer* b : list) {
      KILN_CUDA_CHECK(cudaFreeHost(b->ptr));
      stats_.reserved -= b->capacity;
      buffers_.erase(b->ptr);
      delete b;
    }
    list.clear();
  }
}

void* PinnedPool::allocate(size_t bytes) {
  if (device_count() == 0)
    throw DeviceError("pinned host memory needs a CUDA GPU and its driver, and none is usable here (num_gpus() == 0); "
                      "allocate ordinary host memory instead (drop {.pinned = true} / pin_memory())");
  if (bytes > (size_t{1} << 62))
    throw OutOfMemoryError("pinned host memory: a request of " + format_bytes(bytes) + " cannot be served");
  size_t capacity = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!pending_.empty() && thread_captures() == 0) process_events();  // event queries: not during a capture
  Buffer* buffer = nullptr;
  if (auto it = free_.find(capacity); it != free_.end() && !it->second.empty()) {
    buffer = it->second.back();
    it->second.pop_back();
    stats_.cache_hits++;
  } else {
    void* p = nullptr;
    RelaxedCaptureMode relaxed;  // allowed during a graph capture: it is no stream work
    cudaError_t err = cudaHostAlloc(&p, capacity, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_free_buffers();
      err = cudaHostAlloc(&p, capacity, cudaHostAllocPortable);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw OutOfMemoryError("pinned host memory: cudaHostAlloc of " + format_bytes(capacity) + " (for a request of " +
                               format_bytes(bytes) + ") failed after releasing the pool's cache; the pool holds " +
                               format_bytes(stats_.reserved) + " of pinned memory, " + format_bytes(stats_.allocated) +
                               " of it in use. Free pinned arrays you no longer need, pin less memory (page-locked "
                               "memory is limited by the OS, see ulimit -l), or use ordinary host memory");
      }
    }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaHostAlloc", __FILE__, __LINE__);
    buffer = new Buffer;
    buffer->ptr = p;
    buffer->capacity = capacity;
    try {
      buffers_.emplace(p, buffer);
    } catch (...) {
      (void)cudaFreeHost(p);
      delete buffer;
      throw;
    }
    stats_.reserved += capacity;
    stats_.host_allocs++;
  }
  buffer->allocated = true;
  stats_.allocated += capacity;
  stats_.active_buffers++;
  stats_.allocations++;
  return buffer->ptr;
}

void PinnedPool::free(void* ptr) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buffers_.find(ptr);
  if (it == buffers_.end() || !it->second->allocated) return;
  Buffer* buffer = it->second;
  buffer->allocated = false;
  stats_.allocated -= buffer->capacity;
  stats_.active_buffers--;
  bool failed = false;
  for (const Use& use : buffer->uses) {
    cudaEvent_t event = nullptr;
    try {
      set_device(use.device);
      event = acquire_event(use.device);
      KILN_CUDA_CHECK(cudaEventRecord(event, use.stream));
      pending_.push_back({use.device, event, buffer});
      buffer->pending_events++;
    } catch (...) {
      if (event) release_event(use.device, event);
      failed = true;
      break;
    }
  }
  buffer->uses.clear();
  // Without every event the buffer cannot be proven idle: it is leaked rather than reused too early.
  buffer->leaked = failed;
  if (buffer->pending_events > 0) {
    pending_buffers_++;
  } else if (!failed) {
    try {
      cache(buffer);
    } catch (...) {
      // Out of host memory for the free list: the buffer is simply not reused.
    }
  }
}

void PinnedPool::record_use(const void* ptr, int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buffers_.find(ptr);
  if (it == buffers_.end() || !it->second->allocated) return;
  std::vector<Use>& uses = it->second->uses;
  for (const Use& use : uses)
    if (use.device == device && use.stream == stream) return;
  uses.push_back({device, stream});
}

bool PinnedPool::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return buffers_.count(ptr) != 0;
}

void PinnedPool::empty_cache() {
  if (thread_captures() > 0)
    throw ValueError("empty_host_cache: this thread is capturing a CUDA graph, and CUDA forbids cudaFreeHost and "
                     "event queries during it; call empty_host_cache after the capture");
  std::lock_guard<std::mutex> lock(mutex_);
  if (!pending_.empty()) process_events();
  release_free_buffers();
}

cuda::HostMemoryStats PinnedPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  cuda::HostMemoryStats s = stats_;
  s.cached_buffers = pending_buffers_;
  for (const auto& [capacity, list] : free_) s.cached_buffers += list.size();
  return s;
}

namespace {
void free_pinned(void*, void* data) { PinnedPool::instance().free(data); }
}  // namespace

std::shared_ptr<Storage> pinned_alloc(size_t bytes) {
  PinnedPool& pool = PinnedPool::instance();
  void* p = pool.allocate(bytes);
  try {
    return std::make_shared<Storage>(p, bytes, cpu(), &free_pinned, nullptr, /*pinned=*/true);
  } catch (...) {
    pool.free(p);
    throw;
  }
}

}  // namespace kiln::cuda_impl

namespace kiln::cuda {
HostMemoryStats host_memory_stats() { return cuda_impl::PinnedPool::instance().stats(); }
void empty_host_cache() {
  if (cuda_impl::device_count() > 0) cuda_impl::PinnedPool::instance().empty_cache();
}
}  // namespace kiln::cuda
