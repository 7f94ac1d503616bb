// A fake segment source for the caching allocator's pool logic: fake, never-dereferenced addresses
// from a device of a given capacity and fake events that complete when a test says so (or when the
// allocator waits for them). Shared by test_allocator.cpp and test_allocator_graph_pool.cpp.
#pragma once
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "cuda/allocator.hpp"

namespace kiln_test {

using kiln::cuda_impl::Block;
using kiln::cuda_impl::CachingAllocator;
using kiln::cuda_impl::EventId;
using kiln::cuda_impl::SegmentSource;
using kiln::cuda_impl::StreamId;

inline constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Hands out fake, never-dereferenced addresses from a device of `capacity` bytes. Events complete
// only when the test says so (or when the allocator waits for them).
struct FakeDevice {
  size_t capacity = size_t{1} << 40;
  uintptr_t next_address = 0x100000000;
  std::map<uintptr_t, size_t> segments;  // live segments
  size_t mallocs = 0, releases = 0, failed_mallocs = 0;
  struct FakeEvent {
    StreamId stream;
    bool done = false;
    bool released = false;
  };
  std::vector<FakeEvent> events;  // EventId = index + 1
  size_t waits = 0;
  std::vector<StreamId> capturing;  // streams forked into a capture

  size_t used() const {
    size_t n = 0;
    for (auto& [p, s] : segments) n += s;
    return n;
  }
  void complete_events_on(StreamId stream) {
    for (auto& e : events)
      if (e.stream == stream) e.done = true;
  }
};

class FakeSource final : public SegmentSource {
 public:
  explicit FakeSource(FakeDevice* device) : d_(device) {}
  void* allocate(size_t bytes) override {
    if (d_->used() + bytes > d_->capacity) {
      d_->failed_mallocs++;
      return nullptr;
    }
    uintptr_t p = d_->next_address;
    d_->next_address += bytes + 4096;  // gaps: segments are never adjacent
    d_->segments[p] = bytes;
    d_->mallocs++;
    return reinterpret_cast<void*>(p);
  }
  void release(void* ptr, size_t bytes) override {
    auto it = d_->segments.find(reinterpret_cast<uintptr_t>(ptr));
    ASSERT_NE(it, d_->segments.end()) << "release of an unknown segment";
    EXPECT_EQ(it->second, bytes) << "a segment must be released whole";
    d_->segments.erase(it);
    d_->releases++;
  }
  void memory_info(size_t* free_bytes, size_t* total_bytes) override {
    *total_bytes = d_->capacity;
    *free_bytes = d_->capacity - d_->used();
  }
  EventId record_event(StreamId stream) override {
    d_->events.push_back({stream});
    return reinterpret_cast<EventId>(d_->events.size());
  }
  bool event_done(EventId event) override { return at(event).done; }
  void event_wait(EventId event) override {
    at(event).done = true;
    d_->waits++;
  }
  void event_release(EventId event) noexcept override {
    EXPECT_FALSE(at(event).released) << "event released twice";
    at(event).released = true;
  }
  bool stream_capturing(StreamId stream) override {
    return std::find(d_->capturing.begin(), d_->capturing.end(), stream) != d_->capturing.end();
  }

 private:
  FakeDevice::FakeEvent& at(EventId e) { return d_->events.at(reinterpret_cast<size_t>(e) - 1); }
  FakeDevice* d_;
};

inline StreamId stream(int i) { return reinterpret_cast<StreamId>(static_cast<uintptr_t>(0x1000 * i)); }

struct AllocatorTest : ::testing::Test {
  FakeDevice device;
  std::unique_ptr<CachingAllocator> pool = make(0);
  std::unique_ptr<CachingAllocator> make(size_t limit) {
    return std::make_unique<CachingAllocator>(std::make_unique<FakeSource>(&device), "cuda:7", limit);
  }
  static uintptr_t addr(const Block* b) { return reinterpret_cast<uintptr_t>(b->ptr); }
};

}  // namespace kiln_test

#endif  // KILN_WITH_CUDA
