// The pinned (page-locked) host memory pool (internal): cudaHostAlloc buffers
// cached by size class and shared by all GPUs, so that pinned arrays and the
// staging buffers of pageable copies cost no cudaHostAlloc after warm-up. A
// buffer that asynchronous copies may still read or write is kept out of the
// cache until an event recorded after those copies has completed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/cuda.hpp"

namespace kiln {
class Storage;
}

namespace kiln::cuda_impl {

class PinnedPool {
 public:
  /// The process-wide pool (never destroyed: pinned arrays may outlive static objects).
  static PinnedPool& instance();

  /// The size class a request is served from: 4 KiB minimum, then four classes per power of two
  /// (2^k, 1.25*2^k, 1.5*2^k, 1.75*2^k), so at most 25% is wasted.
  static size_t size_class(size_t bytes);

  /// A pinned buffer of at least `bytes`. Throws DeviceError when there is no GPU/driver,
  /// OutOfMemoryError when cudaHostAlloc fails even after releasing the cache.
  void* allocate(size_t bytes);
  /// Returns a buffer from allocate: cached at once when no stream use was recorded, else once events
  /// recorded now on those streams have completed. Unknown pointers are ignored. Never throws.
  void free(void* ptr) noexcept;
  /// Notes that work queued (so far or later, until free) on `stream` of GPU `device` uses the buffer
  /// starting at `ptr`; no-op when `ptr` is not the start of one of the pool's buffers.
  void record_use(const void* ptr, int device, cudaStream_t stream);
  /// True when `ptr` is the start of a buffer of this pool.
  bool owns(const void* ptr) const;
  /// Frees every cached buffer (cudaFreeHost); buffers in use or waiting for copies are kept.
  void empty_cache();
  cuda::HostMemoryStats stats() const;

 private:
  struct Use {
    int device;
    cudaStream_t stream;
  };
  struct Buffer {
    void* ptr = nullptr;
    size_t capacity = 0;
    bool allocated = false;
    int pending_events = 0;
    bool leaked = false;  ///< an event could not be recorded at free: never reused
    std::vector<Use> uses;
  };
  struct Pending {
    int device;
    cudaEvent_t event;
    Buffer* buffer;
  };
  PinnedPool() = default;
  void process_events();
  void release_free_buffers();
  void cache(Buffer* buffer);

  mutable std::mutex mutex_;
  std::unordered_map<const void*, Buffer*> buffers_;
  std::unordered_map<size_t, std::vector<Buffer*>> free_;
  std::vector<Pending> pending_;
  size_t pending_buffers_ = 0;
  cuda::HostMemoryStats stats_;
};

/// A pinned host Storage of `bytes` (device cpu, pinned() true) from the pool.
std::shared_ptr<Storage> pinned_alloc(size_t bytes);

}  // namespace kiln::cuda_impl
