// CUDA-only controls: memory statistics and limits of the caching device
// allocator, its cache, and the pinned host memory pool (like
// torch.cuda.memory_stats / cupy's MemoryPool), and the TF32 switch of float32
// matmul. These functions exist only in builds with the CUDA backend
// (KILN_WITH_CUDA is defined there); this header includes no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/device.hpp"

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
  size_t pending_blocks = 0;     ///< free blocks not yet reusable: other streams still use them (record_stream)
  size_t segments = 0;           ///< cudaMalloc'd segments held now
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
/// untouched. Waits for blocks still used by other streams first. Throws DeviceError as memory_stats.
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
/// Frees every cached pinned buffer that no copy uses any more (cudaFreeHost).
void empty_host_cache();

/// Allows TF32 tensor cores for float32 matmul (off by default, like torch.backends.cuda.matmul.allow_tf32):
/// faster, with products rounded to 10 mantissa bits (accumulation stays float32). Process-wide; later calls only.
void set_allow_tf32(bool allow);
/// Whether float32 matmul may use TF32 tensor cores (see set_allow_tf32).
bool allow_tf32();

}  // namespace kiln::cuda
