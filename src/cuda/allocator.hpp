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
#include <thread>
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
  /// True when work queued on `stream` now is captured into a CUDA graph (a stream forked into a capture).
  virtual bool stream_capturing(StreamId /*stream*/) { return false; }
};

class CachingAllocator;
struct PrivatePool;

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
  PrivatePool* private_pool = nullptr;  ///< the graph pool its segment belongs to (nullptr: the ordinary pools)
};

/// Orders a pool by stream, then size, then address, so lower_bound finds the best fit on a stream.
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const;
};
/// Free blocks of one size class (small or large), best fit by (stream, size, address).
using BlockPool = std::set<Block*, BlockOrder>;

/// A private pool for CUDA graphs (like PyTorch's graph mempools): allocations on a stream being captured
/// into it come from its own segments, which serve nothing else while it lives, so a graph's replays write
/// to addresses no other work is given. Owned by its CachingAllocator; all fields are guarded by its mutex.
struct PrivatePool {
  BlockPool small, large;  ///< its free blocks
  size_t reserved = 0;     ///< bytes of its segments
  size_t segments = 0;
  bool capturing = false;  ///< a capture routes allocations to it now
  bool released = false;   ///< given up (release_pool): each segment joins the ordinary pools once wholly free
  std::vector<StreamId> streams;  ///< set at release: streams whose queued work (replays) may still use its memory
  std::vector<Block*> held;       ///< other blocks freed during a capture into it: a replay may still read them
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

  /// A block of at least `bytes` (0 counts as 1) usable on `stream`. While `stream` is captured into a
  /// private pool (begin_capture), the block comes from that pool unless `graph_pool` is false. Throws
  /// OutOfMemoryError.
  Block* allocate(size_t bytes, StreamId stream, bool graph_pool = true);
  /// Returns a block: reusable on its stream at once, on other streams once the streams
  /// given to record_stream have finished the work queued before this call. Never throws.
  void free(Block* block) noexcept;
  /// Notes that `stream` uses `block` (see free).
  void record_stream(Block* block, StreamId stream);
  /// Waits for pending blocks, then releases every cached segment that is wholly free.
  void empty_cache();
  cuda::MemoryStats stats() const;
  /// Hands back blocks whose pending events have completed and runs deferred frees (never blocks; a no-op on
  /// a thread that is capturing a graph). memory_stats calls it, so work known to be done shows as done.
  void collect();
  void reset_peak();
  size_t limit() const;
  void set_limit(size_t bytes);
  const std::string& device_name() const { return name_; }

  // CUDA graphs. While this thread captures (cuda_impl::thread_captures() > 0) nothing here queries, waits
  // for or records events, nor calls cudaFree: CUDA forbids it during a capture. Those steps are deferred.
  /// A new, empty private pool.
  PrivatePool* create_pool();
  /// Routes allocations on `stream` to `pool` until end_capture; frees by this thread meanwhile of blocks not
  /// from `pool` are held for the pool (a replay may read them). Call it before cudaStreamBeginCapture.
  /// Throws ValueError when the pool is released or already capturing, or `stream` is already routed.
  void begin_capture(PrivatePool* pool, StreamId stream);
  /// Ends the routing of begin_capture (after cudaStreamEndCapture). Never throws.
  void end_capture(PrivatePool* pool, StreamId stream) noexcept;
  /// Gives `pool` up: blocks held for it and its wholly free segments go to the ordinary pools once the work
  /// queued so far on `streams` is done (stream order suffices on a block's own stream); its blocks still
  /// handed out follow when they are freed. The pool is deleted when it has no segment left.
  void release_pool(PrivatePool* pool, const std::vector<StreamId>& streams);

  /// Request size rounded up to the block granularity (0 -> 512).
  static size_t round_size(size_t bytes);
  /// The segment size cudaMalloc'd for a rounded request that no cached block fits.
  static size_t segment_size(size_t rounded);

 private:
  using Pool = BlockPool;
  struct Capture {
    PrivatePool* pool;
    StreamId stream;
    std::thread::id thread;
  };
  Pool& pool_for(const Block* b) {
    if (b->private_pool) return b->small ? b->private_pool->small : b->private_pool->large;
    return b->small ? small_pool_ : large_pool_;
  }
  Block* find_free(Pool& pool, size_t size, StreamId stream);
  Block* new_segment(bool small, size_t size, StreamId stream, PrivatePool* owner);
  void split(Block* block, size_t size);
  Block* return_to_pool(Block* block);
  void give_back(Block* block);
  void release_block(Block* block);
  void detach_segment(Block* segment);
  void delete_pool_if_empty(PrivatePool* pool);
  void process_events();
  void process_deferred();
  void wait_pending();
  void release_cached();
  bool may_record_events() const;
  [[noreturn]] void throw_oom(size_t bytes, size_t size);

  std::unique_ptr<SegmentSource> source_;
  std::string name_;
  size_t limit_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::vector<std::pair<EventId, Block*>> pending_;
  std::vector<Block*> deferred_;      // freed with record_stream uses during a capture: events recorded later
  std::vector<Capture> captures_;     // streams routed to private pools now
  std::vector<PrivatePool*> pools_;   // private pools alive (released ones until their last segment leaves)
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
