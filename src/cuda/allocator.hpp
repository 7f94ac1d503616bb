// The caching device allocator (internal): one pool per GPU that keeps freed
// blocks for reuse instead of calling cudaMalloc/cudaFree on every array, in
// the spirit of PyTorch's CUDACachingAllocator. The policy is listed at the top
// of allocator.cpp. The bookkeeping (CachingAllocator) sees device memory and
// events only through SegmentSource, so it is tested without a GPU; this
// header includes no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kiln/cuda.hpp"

namespace kiln::cuda_impl {

using StreamId = void*;  ///< a cudaStream_t (nullptr: the legacy default stream)
using EventId = void*;   ///< a cudaEvent_t

/// Where the allocator gets device memory and stream events from (cudaMalloc and cudaEvent on a GPU,
/// a fake in tests).
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  /// `bytes` of device memory, or nullptr when the device has no room (other failures throw).
  virtual void* allocate(size_t bytes) = 0;
  /// Gives back memory from allocate.
  virtual void release(void* ptr, size_t bytes) = 0;
  /// Free and total bytes of the device, as the driver reports them.
  virtual void memory_info(size_t* free_bytes, size_t* total_bytes) = 0;
  /// An event recorded now at the end of `stream`.
  virtual EventId record_event(StreamId stream) = 0;
  /// True when `event` has completed (never blocks).
  virtual bool event_done(EventId event) = 0;
  /// Blocks until `event` has completed.
  virtual void event_wait(EventId event) = 0;
  /// Gives back an event from record_event. Never throws.
  virtual void event_release(EventId event) noexcept = 0;
};

class CachingAllocator;

/// A range of a segment, handed out or cached. Neighbours in the same segment are linked by prev/next.
struct Block {
  static constexpr uint64_t kMagic = 0x6b696c6e426c6b31ULL;  // "kilnBlk1": identifies blocks behind a Storage context
  uint64_t magic = kMagic;
  CachingAllocator* owner = nullptr;
  void* ptr = nullptr;
  size_t size = 0;       ///< bytes of this range (a multiple of 512)
  size_t requested = 0;  ///< bytes the user asked for (allocated blocks)
  StreamId stream = nullptr;  ///< the stream it was allocated on; it is cached in that stream's pool
  bool small = false;         ///< in the small pool (segments of 2 MiB)
  bool allocated = false;
  bool in_pool = false;
  int pending_events = 0;     ///< events of other streams to wait for before reuse
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<StreamId> used_on;  ///< streams added by record_stream (other than `stream`)
};

/// Orders a pool by stream, then size, then address, so lower_bound finds the best fit on a stream.
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const;
};

/// The pool logic of one device. Thread-safe (one mutex).
class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;                  ///< every block is a multiple of this
  static constexpr size_t kSmallRequest = 1 << 20;       ///< requests up to 1 MiB use the small pool
  static constexpr size_t kSmallSegment = 2 << 20;       ///< segment size of the small pool
  static constexpr size_t kMediumRequest = 10 << 20;     ///< large requests below 10 MiB ...
  static constexpr size_t kMediumSegment = 20 << 20;     ///< ... share 20 MiB segments
  static constexpr size_t kLargeRound = 2 << 20;         ///< larger segments are rounded to 2 MiB

  /// `device_name` ("cuda:0") is used in messages; `limit` caps reserved bytes (0: none).
  CachingAllocator(std::unique_ptr<SegmentSource> source, std::string device_name, size_t limit);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` (0 counts as 1) usable on `stream`. Throws OutOfMemoryError.
  Block* allocate(size_t bytes, StreamId stream);
  /// Returns a block: reusable on its stream at once, on other streams once the streams
  /// given to record_stream have finished the work queued before this call. Never throws.
  void free(Block* block) noexcept;
  /// Notes that `stream` uses `block` (see free).
  void record_stream(Block* block, StreamId stream);
  /// Waits for pending blocks, then releases every cached segment that is wholly free.
  void empty_cache();
  cuda::MemoryStats stats() const;
  void reset_peak();
  size_t limit() const;
  void set_limit(size_t bytes);
  const std::string& device_name() const { return name_; }

  /// Request size rounded up to the block granularity (0 -> 512).
  static size_t round_size(size_t bytes);
  /// The segment size cudaMalloc'd for a rounded request that no cached block fits.
  static size_t segment_size(size_t rounded);

 private:
  using Pool = std::set<Block*, BlockOrder>;
  Pool& pool_for(const Block* b) { return b->small ? small_pool_ : large_pool_; }
  Block* find_free(bool small, size_t size, StreamId stream);
  Block* new_segment(bool small, size_t size, StreamId stream);
  void split(Block* block, size_t size);
  void return_to_pool(Block* block);
  void process_events();
  void wait_pending();
  void release_cached();
  [[noreturn]] void throw_oom(size_t bytes, size_t size);

  std::unique_ptr<SegmentSource> source_;
  std::string name_;
  size_t limit_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::vector<std::pair<EventId, Block*>> pending_;
  cuda::MemoryStats stats_;
  bool last_failure_from_limit_ = false;
};

/// Parses a memory limit: bytes ("2147483648"), a size with a unit ("2GB" = 2*10^9, "512MiB" = 512*2^20;
/// B, KB/MB/GB/TB, KiB/MiB/GiB/TiB, K/M/G/T as KiB..., case-insensitive), or a percent of `total_bytes`
/// ("80%"). "", "0" and "none" mean no limit (0). Throws ValueError naming `what` (the variable).
size_t parse_memory_limit(const std::string& text, size_t total_bytes, const char* what = "KILN_GPU_MEMORY_LIMIT");
/// "1.50 GiB (1610612736 bytes)" style text for messages.
std::string format_bytes(size_t bytes);

/// The allocator of GPU `device`, created on first use (reading KILN_GPU_MEMORY_LIMIT) and never
/// destroyed, so Storage deleters may run at any time. Throws DeviceError / ValueError.
CachingAllocator& device_allocator(int device);

}  // namespace kiln::cuda_impl
