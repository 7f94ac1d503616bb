// The caching device allocator: pool logic (CachingAllocator), its CUDA
// memory source, the per-device singletons and the public memory API of
// kiln/cuda.hpp.
//
// Policy:
//  1. Requests are rounded up to 512 bytes (0 bytes counts as 512).
//  2. Requests up to 1 MiB use the small pool, whose cudaMalloc segments are 2 MiB. Larger requests use
//     the large pool: below 10 MiB they share 20 MiB segments; from 10 MiB on, a segment is the request
//     rounded up to 2 MiB. When the preferred segment does not fit (limit or device), the request
//     rounded up to 2 MiB is tried before giving up.
//  3. Best fit: the smallest cached block of the request's pool and stream that is large enough (ties:
//     the lowest address), found in a set ordered by (stream, size, address).
//  4. Split: the rest of the chosen block stays cached when it is >= 512 B (small pool) or > 1 MiB
//     (large pool); otherwise the whole block is handed out.
//  5. Coalesce: a returned block merges with the free neighbours of its segment. Segments never merge.
//  6. Streams: a block belongs to the stream it was allocated on and is cached in that stream's pool,
//     reusable there at once (stream order makes that safe). record_stream adds other streams: on free
//     an event is recorded on each, and the block enters its pool only when all have completed
//     (events are polled at every allocation).
//  7. Limit: reserved bytes plus a new segment must not exceed the limit (KILN_GPU_MEMORY_LIMIT or
//     cuda::set_memory_limit); checked before calling cudaMalloc.
//  8. Failure (limit or cudaMalloc): wait for the pending blocks and look again; then cudaFree every
//     wholly free segment and try once more; then throw OutOfMemoryError with the request, allocated,
//     reserved, the device's free memory and the limit.
//  9. Memory goes back to CUDA only in empty_cache() and on that retry.
// 10. One mutex per device guards it all; cudaMalloc/cudaFree (rare) run under it.
// 11. CUDA graphs: while a stream is captured into a private pool (begin_capture), allocations on it come
//     from that pool's own segments (best fit and splitting as above, per stream); blocks freed during the
//     capture return there and serve later allocations of the capture, in graph order. Any other block
//     freed by the capturing thread during the capture is held until the pool is released (a replay may
//     read it). Released pools hand each wholly free segment to the ordinary pools, after events on the
//     streams that replayed the graph. The capturing thread never queries, waits for or records events,
//     nor calls cudaFree: record_stream frees are deferred until no capture runs, the retries of 8 are skipped.
#include "cuda/allocator.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "core/env.hpp"
#include "cuda/runtime.hpp"
#include "kiln/array.hpp"

namespace kiln::cuda_impl {

bool BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return std::less<StreamId>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<void*>()(a->ptr, b->ptr);
}

namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
// Requests above this cannot be rounded without overflow and never fit a device anyway.
constexpr size_t kMaxRequest = size_t{1} << 62;
}  // namespace

size_t CachingAllocator::round_size(size_t bytes) { return bytes == 0 ? kRound : round_up(bytes, kRound); }

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kMediumRequest) return kMediumSegment;
  return round_up(rounded, kLargeRound);
}

CachingAllocator::CachingAllocator(std::unique_ptr<SegmentSource> source, std::string device_name, size_t limit)
    : source_(std::move(source)), name_(std::move(device_name)), limit_(limit) {}

CachingAllocator::~CachingAllocator() {
  // Only test allocators are destroyed (device ones are leaked): give every segment back.
  std::set<Block*> heads;
  auto add_head = [&](Block* b) {
    while (b->prev) b = b->prev;
    heads.insert(b);
  };
  for (Pool* pool : {&small_pool_, &large_pool_})
    for (Block* b : *pool) add_head(b);
  for (PrivatePool* p : pools_) {
    for (Pool* pool : {&p->small, &p->large})
      for (Block* b : *pool) add_head(b);
    for (Block* b : p->held) add_head(b);
  }
  for (Block* b : deferred_) add_head(b);
  for (auto& [event, block] : pending_) {
    source_->event_release(event);
    add_head(block);
  }
  for (Block* head : heads) {
    size_t total = 0;
    for (Block* b = head; b; b = b->next) total += b->size;
    try {
      source_->release(head->ptr, total);
    } catch (...) {
      // Destructors must not throw; the memory is lost either way.
    }
    for (Block* b = head; b;) {
      Block* next = b->next;
      if (!b->allocated) delete b;  // blocks still handed out stay readable (their memory is gone)
      b = next;
    }
  }
  for (PrivatePool* p : pools_) delete p;
}

Block* CachingAllocator::find_free(Pool& pool, size_t size, StreamId stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  b->in_pool = false;
  return b;
}

Block* CachingAllocator::new_segment(bool small, size_t size, StreamId stream, PrivatePool* owner) {
  size_t preferred = segment_size(size);
  size_t minimal = small ? kSmallSegment : round_up(size, kLargeRound);
  const size_t candidates[2] = {preferred, minimal};
  for (int i = 0; i < (preferred == minimal ? 1 : 2); ++i) {
    size_t seg = candidates[i];
    if (limit_ != 0 && (stats_.reserved > limit_ || limit_ - stats_.reserved < seg)) {
      last_failure_from_limit_ = true;
      continue;
    }
    void* p = source_->allocate(seg);
    if (!p) {
      last_failure_from_limit_ = false;
      continue;
    }
    auto* b = new Block;
    b->owner = this;
    b->ptr = p;
    b->size = seg;
    b->stream = stream;
    b->small = small;
    b->private_pool = owner;
    if (owner) {
      owner->reserved += seg;
      owner->segments++;
      stats_.graph_reserved += seg;
    }
    stats_.reserved += seg;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    stats_.segments++;
    stats_.device_mallocs++;
    return b;
  }
  return nullptr;
}

void CachingAllocator::split(Block* block, size_t size) {
  size_t remaining = block->size - size;
  bool worth_it = block->small ? remaining >= kRound : remaining > kSmallRequest;
  if (!worth_it) return;
  auto* rest = new Block;
  rest->owner = this;
  rest->ptr = static_cast<char*>(block->ptr) + size;
  rest->size = remaining;
  rest->stream = block->stream;
  rest->small = block->small;
  rest->private_pool = block->private_pool;
  rest->prev = block;
  rest->next = block->next;
  if (block->next) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  return_to_pool(rest);
}

Block* CachingAllocator::return_to_pool(Block* block) {
  Pool& pool = pool_for(block);
  if (Block* prev = block->prev; prev && prev->in_pool) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next && next->in_pool) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    delete next;
  }
  block->in_pool = true;
  block->in_pool = pool.insert(block).second;
  return block;
}

void CachingAllocator::give_back(Block* block) {
  Block* merged = return_to_pool(block);
  PrivatePool* p = merged->private_pool;
  if (p && p->released && merged->in_pool && !merged->prev && !merged->next) detach_segment(merged);
}

bool CachingAllocator::may_record_events() const { return thread_captures() == 0 && captures_.empty(); }

void CachingAllocator::release_block(Block* block) {
  if (block->used_on.empty()) {
    give_back(block);
    return;
  }
  if (!may_record_events()) {
    // An event recorded on a capturing stream would belong to the graph and could never be queried.
    try {
      deferred_.push_back(block);
      stats_.pending_blocks++;
    } catch (...) {
      // Out of host memory: the block is leaked rather than reused while a stream may use it.
    }
    return;
  }
  for (StreamId stream : block->used_on) {
    EventId event = nullptr;
    try {
      event = source_->record_event(stream);
      pending_.emplace_back(event, block);
      block->pending_events++;
    } catch (...) {
      // CUDA is failing (or shutting down): without the event the block cannot be proven idle.
      if (event) source_->event_release(event);
    }
  }
  block->used_on.clear();
  if (block->pending_events > 0) stats_.pending_blocks++;
  // else: no event could be recorded; the block is leaked rather than reused while a stream may use it.
}

void CachingAllocator::process_deferred() {
  if (deferred_.empty() || !may_record_events()) return;
  std::vector<Block*> blocks;
  blocks.swap(deferred_);
  for (Block* b : blocks) {
    stats_.pending_blocks--;
    release_block(b);
  }
}

void CachingAllocator::detach_segment(Block* segment) {
  PrivatePool* p = segment->private_pool;
  pool_for(segment).erase(segment);
  segment->in_pool = false;
  segment->private_pool = nullptr;
  p->reserved -= segment->size;
  p->segments--;
  stats_.graph_reserved -= segment->size;
  // Replays queued on other streams may still use it: it joins its stream's pool after their events.
  for (StreamId s : p->streams)
    if (s != segment->stream && std::find(segment->used_on.begin(), segment->used_on.end(), s) == segment->used_on.end())
      segment->used_on.push_back(s);
  delete_pool_if_empty(p);
  release_block(segment);
}

void CachingAllocator::delete_pool_if_empty(PrivatePool* pool) {
  if (!pool->released || pool->segments != 0 || !pool->held.empty()) return;
  pools_.erase(std::remove(pools_.begin(), pools_.end(), pool), pools_.end());
  delete pool;
}

void CachingAllocator::process_events() {
  for (size_t i = 0; i < pending_.size();) {
    auto [event, block] = pending_[i];
    if (!source_->event_done(event)) {
      ++i;
      continue;
    }
    pending_[i] = pending_.back();
    pending_.pop_back();
    source_->event_release(event);
    if (--block->pending_events == 0) {
      stats_.pending_blocks--;
      give_back(block);
    }
  }
}

void CachingAllocator::wait_pending() {
  while (!pending_.empty()) {
    auto [event, block] = pending_.back();
    source_->event_wait(event);
    pending_.pop_back();
    source_->event_release(event);
    if (--block->pending_events == 0) {
      stats_.pending_blocks--;
      give_back(block);
    }
  }
}

void CachingAllocator::release_cached() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      source_->release(b->ptr, b->size);
      stats_.reserved -= b->size;
      stats_.segments--;
      stats_.device_frees++;
      it = pool->erase(it);
      delete b;
    }
  }
}

Block* CachingAllocator::allocate(size_t bytes, StreamId stream, bool graph_pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > kMaxRequest) {
    last_failure_from_limit_ = false;
    stats_.ooms++;
    throw_oom(bytes, bytes);
  }
  size_t size = round_size(bytes);
  bool small = size <= kSmallRequest;
  PrivatePool* target = nullptr;
  if (graph_pool && !captures_.empty()) {
    for (const Capture& c : captures_)
      if (c.stream == stream) target = c.pool;
    if (!target && thread_captures() > 0 && source_->stream_capturing(stream)) {
      // A stream forked into this thread's capture (an event recorded on the capturing stream, waited on
      // here): its allocations belong to the graph too.
      const std::thread::id self = std::this_thread::get_id();
      for (const Capture& c : captures_)
        if (c.thread == self) {
          target = c.pool;
          break;
        }
    }
  }
  Pool& pool = target ? (small ? target->small : target->large) : (small ? small_pool_ : large_pool_);
  // cudaEventQuery/cudaEventSynchronize/cudaFree are forbidden to a capturing thread.
  const bool capturing_thread = thread_captures() > 0;
  if (!pending_.empty() && !capturing_thread) process_events();
  process_deferred();
  Block* b = find_free(pool, size, stream);
  bool hit = b != nullptr;
  if (!b) b = new_segment(small, size, stream, target);
  if (!b && !pending_.empty() && !capturing_thread) {
    wait_pending();
    b = find_free(pool, size, stream);
    hit = b != nullptr;
  }
  if (!b && !capturing_thread && captures_.empty()) {
    stats_.alloc_retries++;
    release_cached();
    b = new_segment(small, size, stream, target);
  }
  if (!b) {
    stats_.ooms++;
    throw_oom(bytes, size);
  }
  if (hit) stats_.cache_hits++;
  split(b, size);
  b->allocated = true;
  b->requested = bytes;
  stats_.allocated += b->size;
  stats_.requested += bytes;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  stats_.active_blocks++;
  stats_.allocations++;
  return b;
}

void CachingAllocator::free(Block* block) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  block->allocated = false;
  stats_.allocated -= block->size;
  stats_.requested -= block->requested;
  stats_.active_blocks--;
  stats_.frees++;
  block->requested = 0;
  if (!captures_.empty() && thread_captures() > 0) {
    // Freed by a thread that captures into one of this device's pools: unless the block is the capture's own
    // (reused in graph order), the graph may read it on every replay, so it is held until the pool goes.
    const std::thread::id self = std::this_thread::get_id();
    for (const Capture& c : captures_) {
      if (c.thread != self) continue;
      if (block->private_pool == c.pool) break;
      try {
        c.pool->held.push_back(block);
        stats_.pending_blocks++;
      } catch (...) {
        // Out of host memory: the block is leaked rather than reused while the graph may read it.
      }
      return;
    }
  }
  process_deferred();
  release_block(block);
}

void CachingAllocator::record_stream(Block* block, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!block->allocated || stream == block->stream) return;
  if (std::find(block->used_on.begin(), block->used_on.end(), stream) == block->used_on.end())
    block->used_on.push_back(stream);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_captures() > 0 || !captures_.empty())
    throw ValueError("empty_cache: a CUDA graph capture is under way on " + name_ +
                     " (or on this thread), and CUDA forbids cudaFree and event waits during it; call empty_cache "
                     "after the capture");
  process_deferred();
  wait_pending();
  release_cached();
}

PrivatePool* CachingAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto pool = std::make_unique<PrivatePool>();
  pools_.push_back(pool.get());
  return pool.release();
}

void CachingAllocator::begin_capture(PrivatePool* pool, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pool->released)
    throw ValueError("CUDA graph capture on " + name_ + ": the memory pool was released; capture into a new pool");
  if (pool->capturing)
    throw ValueError("CUDA graph capture on " + name_ +
                     ": another capture uses this memory pool now; captures sharing a pool must run one after the other");
  for (const Capture& c : captures_)
    if (c.stream == stream)
      throw ValueError("CUDA graph capture on " + name_ + ": the stream is already being captured");
  captures_.push_back({pool, stream, std::this_thread::get_id()});
  pool->capturing = true;
}

void CachingAllocator::end_capture(PrivatePool* pool, StreamId stream) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = captures_.begin(); it != captures_.end(); ++it)
    if (it->pool == pool && it->stream == stream) {
      captures_.erase(it);
      pool->capturing = false;
      break;
    }
  process_deferred();
}

void CachingAllocator::release_pool(PrivatePool* pool, const std::vector<StreamId>& streams) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (StreamId s : streams)
    if (std::find(pool->streams.begin(), pool->streams.end(), s) == pool->streams.end()) pool->streams.push_back(s);
  pool->released = true;
  std::vector<Block*> held;
  held.swap(pool->held);
  for (Block* b : held) {
    stats_.pending_blocks--;
    for (StreamId s : pool->streams)
      if (s != b->stream && std::find(b->used_on.begin(), b->used_on.end(), s) == b->used_on.end())
        b->used_on.push_back(s);
    release_block(b);
  }
  std::vector<Block*> free_segments;
  for (Pool* p : {&pool->small, &pool->large})
    for (Block* b : *p)
      if (!b->prev && !b->next) free_segments.push_back(b);
  if (free_segments.empty()) {
    delete_pool_if_empty(pool);  // may delete it
  } else {
    for (Block* b : free_segments) detach_segment(b);  // the last one may delete the pool
  }
  process_deferred();
}

void CachingAllocator::collect() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_captures() > 0) return;  // event queries are forbidden to a capturing thread
  if (!pending_.empty()) process_events();
  process_deferred();
}

cuda::MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  cuda::MemoryStats s = stats_;
  s.cached_blocks = small_pool_.size() + large_pool_.size() + stats_.pending_blocks;
  for (const PrivatePool* p : pools_) s.cached_blocks += p->small.size() + p->large.size();
  s.graph_pools = pools_.size();
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

size_t CachingAllocator::limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return limit_;
}

void CachingAllocator::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = bytes;
}

void CachingAllocator::throw_oom(size_t bytes, size_t size) {
  size_t free_bytes = 0, total_bytes = 0;
  std::string device_state;
  try {
    source_->memory_info(&free_bytes, &total_bytes);
    device_state = "the device has " + format_bytes(free_bytes) + " free of " + format_bytes(total_bytes);
  } catch (const std::exception&) {
    device_state = "the device's free memory is unknown";
  }
  std::string limit = limit_ ? format_bytes(limit_) + " (KILN_GPU_MEMORY_LIMIT or cuda::set_memory_limit)"
                             : std::string("none (KILN_GPU_MEMORY_LIMIT unset)");
  std::string msg = name_ + " out of memory: tried to allocate " + format_bytes(bytes);
  if (size != bytes) msg += " (" + std::to_string(size) + " bytes rounded)";
  msg += "; kiln has " + format_bytes(stats_.allocated) + " allocated to arrays and " +
         format_bytes(stats_.reserved) + " reserved on " + name_ + " after releasing its cache; " + device_state +
         "; limit: " + limit + ". ";
  if (thread_captures() > 0 || !captures_.empty())
    msg += "A CUDA graph capture is under way, so the cache could not be released for this request. ";
  if (last_failure_from_limit_ && limit_ != 0)
    msg += "The limit refused this request: raise KILN_GPU_MEMORY_LIMIT (or cuda::set_memory_limit), or ";
  else
    msg += "To fix it: ";
  msg += "free arrays you no longer need (let them go out of scope), use smaller batches or a smaller dtype, "
         "or move data to another device";
  throw OutOfMemoryError(msg);
}

std::string format_bytes(size_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return std::string(buf) + " (" + std::to_string(bytes) + " bytes)";
}

size_t parse_memory_limit(const std::string& text, size_t total_bytes, const char* what) {
  auto bad = [&](const std::string& why) {
    return ValueError(std::string(what) + "='" + text + "' " + why +
                      "; use bytes (\"2147483648\"), a size with a unit (\"2GB\", \"512MiB\") or a percent of "
                      "the GPU's memory (\"80%\"); unset it for no limit");
  };
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s.empty() || s == "0" || s == "none") return 0;
  size_t digits = 0;
  int dots = 0;
  while (digits < s.size() && (std::isdigit(static_cast<unsigned char>(s[digits])) || s[digits] == '.')) {
    if (s[digits] == '.') ++dots;
    ++digits;
  }
  if (digits == 0 || dots > 1 || (digits == 1 && dots == 1)) throw bad("is not a memory size");
  double value = std::strtod(s.substr(0, digits).c_str(), nullptr);
  std::string unit = s.substr(digits);
  double bytes = 0;
  if (unit == "%") {
    if (!(value > 0.0 && value <= 100.0)) throw bad("is not a percent in (0, 100]");
    bytes = static_cast<double>(total_bytes) * value / 100.0;
  } else {
    static const std::pair<const char*, double> kUnits[] = {
        {"", 1.0},          {"b", 1.0},         {"kb", 1e3},         {"mb", 1e6},          {"gb", 1e9},
        {"tb", 1e12},       {"k", 1024.0},      {"kib", 1024.0},     {"m", 1048576.0},     {"mib", 1048576.0},
        {"g", 1073741824.0}, {"gib", 1073741824.0}, {"t", 1099511627776.0}, {"tib", 1099511627776.0}};
    bool found = false;
    for (const auto& [name, scale] : kUnits)
      if (unit == name) {
        bytes = value * scale;
        found = true;
      }
    if (!found) throw bad("has an unknown unit '" + unit + "'");
  }
  if (bytes >= 9.0e18) throw bad("is too large");
  auto result = static_cast<size_t>(bytes);
  if (result == 0) throw bad("is below one byte");
  return result;
}

// ---------------------------------------------------------------------------------------------
// The CUDA side: segments from cudaMalloc, events from the device's event pool.

namespace {

class CudaSegmentSource final : public SegmentSource {
 public:
  explicit CudaSegmentSource(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    set_device(device_);
    void* p = nullptr;
    // During a graph capture cudaMalloc is allowed only in relaxed mode; the graph never sees it (it is
    // not stream work) and replays reuse the memory (as PyTorch's allocator does).
    RelaxedCaptureMode relaxed;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    return p;
  }
  void release(void* ptr, size_t) override {
    set_device(device_);
    KILN_CUDA_CHECK(cudaFree(ptr));
  }
  void memory_info(size_t* free_bytes, size_t* total_bytes) override {
    set_device(device_);
    RelaxedCaptureMode relaxed;  // an out-of-memory message during a graph capture
    KILN_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
  }
  EventId record_event(StreamId stream) override {
    set_device(device_);  // a null stream means the current device's default stream
    cudaEvent_t event = acquire_event(device_);
    cudaError_t err = cudaEventRecord(event, static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) {
      release_event(device_, event);
      throw_cuda_error(err, "cudaEventRecord", __FILE__, __LINE__);
    }
    return event;
  }
  bool event_done(EventId event) override {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    throw_cuda_error(err, "cudaEventQuery", __FILE__, __LINE__);
  }
  void event_wait(EventId event) override { KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }
  void event_release(EventId event) noexcept override { release_event(device_, static_cast<cudaEvent_t>(event)); }
  bool stream_capturing(StreamId stream) override {
    set_device(device_);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
      (void)cudaGetLastError();  // the legacy stream while a blocking stream is captured: not part of it
      return false;
    }
    return status == cudaStreamCaptureStatusActive;
  }

 private:
  int device_;
};

void free_device_block(void* context, void*) {
  auto* block = static_cast<Block*>(context);
  block->owner->free(block);
}

}  // namespace

CachingAllocator& device_allocator(int device) {
  static std::array<std::atomic<CachingAllocator*>, kMaxDevices> allocators{};
  static std::mutex creation;
  check_device(device, "allocate");
  CachingAllocator* a = allocators[static_cast<size_t>(device)].load(std::memory_order_acquire);
  if (a) return *a;
  std::lock_guard<std::mutex> lock(creation);
  a = allocators[static_cast<size_t>(device)].load(std::memory_order_acquire);
  if (a) return *a;
  auto source = std::make_unique<CudaSegmentSource>(device);
  size_t limit = 0;
  if (const std::optional<std::string> env = detail::env_string("KILN_GPU_MEMORY_LIMIT")) {
    size_t free_bytes = 0, total_bytes = 0;
    source->memory_info(&free_bytes, &total_bytes);
    limit = parse_memory_limit(*env, total_bytes);
  }
  // Leaked on purpose: arrays may outlive every static object, and their deleters come back here.
  a = new CachingAllocator(std::move(source), "cuda:" + std::to_string(device), limit);
  allocators[static_cast<size_t>(device)].store(a, std::memory_order_release);
  return *a;
}

std::shared_ptr<Storage> device_alloc(int device, size_t bytes, cudaStream_t stream, bool graph_pool) {
  CachingAllocator& allocator = device_allocator(device);
  Block* block = allocator.allocate(bytes, stream, graph_pool);
  try {
    return std::make_shared<Storage>(block->ptr, bytes, Device{DeviceType::CUDA, device}, &free_device_block, block);
  } catch (...) {
    allocator.free(block);
    throw;
  }
}

void record_stream(const Storage& storage, cudaStream_t stream) {
  auto* block = static_cast<Block*>(storage.context());
  if (!storage.device().is_cuda() || !block || block->magic != Block::kMagic) return;
  block->owner->record_stream(block, stream);
}

}  // namespace kiln::cuda_impl

// ---------------------------------------------------------------------------------------------
// Public API (kiln/cuda.hpp).

namespace kiln::cuda {

namespace {
cuda_impl::CachingAllocator& allocator_of(Device device, const char* op) {
  if (!device.is_cuda())
    throw DeviceError(std::string(op) + ": " + device.str() +
                      " has no caching allocator; pass a GPU device such as gpu(0)");
  cuda_impl::check_device(device.index, op);
  return cuda_impl::device_allocator(device.index);
}
}  // namespace

MemoryStats memory_stats(Device device) {
  cuda_impl::CachingAllocator& allocator = allocator_of(device, "memory_stats");
  allocator.collect();
  return allocator.stats();
}
void empty_cache(Device device) { allocator_of(device, "empty_cache").empty_cache(); }
void reset_peak_memory_stats(Device device) { allocator_of(device, "reset_peak_memory_stats").reset_peak(); }
size_t memory_limit(Device device) { return allocator_of(device, "memory_limit").limit(); }
void set_memory_limit(Device device, size_t bytes) { allocator_of(device, "set_memory_limit").set_limit(bytes); }

}  // namespace kiln::cuda
