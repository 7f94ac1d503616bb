// The caching allocator's private pools of CUDA graphs, on the fake segment source of
// fake_segment_source.hpp (no GPU needed; the fake device stands in for captures:
// ThreadCaptureScope marks this thread as capturing, begin_capture routes a stream to the
// pool, exactly as Graph::capture_begin does): captured and forked streams allocate from the
// graph's pool, blocks freed during a capture are held until the pool is released, pools
// replayed on other streams, and capture misuse. The GPU side is in test_graph.cpp.
#include <gtest/gtest.h>

#include <string>

#include "kiln/kiln.hpp"

#ifdef KILN_WITH_CUDA
#include "cuda/allocator.hpp"
#include "cuda/runtime.hpp"
#include "fake_segment_source.hpp"

namespace {

using kiln::cuda_impl::Block;
using kiln::cuda_impl::CachingAllocator;
using kiln_test::KiB;
using kiln_test::MiB;
using kiln::cuda_impl::PrivatePool;
using kiln::cuda_impl::ThreadCaptureScope;
using kiln_test::stream;

// A suite of its own: GoogleTest refuses one suite name used with fixture classes of two translation units.
struct GraphPoolTest : kiln_test::AllocatorTest {};

TEST_F(GraphPoolTest, a_captured_stream_allocates_from_the_private_pool_only) {
  Block* cached = pool->allocate(4 * KiB, stream(1));
  pool->free(cached);  // an ordinary cached block on stream 1
  PrivatePool* graph = pool->create_pool();
  {
    ThreadCaptureScope capturing;
    pool->begin_capture(graph, stream(1));
    Block* a = pool->allocate(4 * KiB, stream(1));
    EXPECT_EQ(a->private_pool, graph);
    EXPECT_NE(a->ptr, cached->ptr) << "a captured allocation must not take an ordinary block";
    EXPECT_EQ(device.mallocs, 2u);
    Block* other = pool->allocate(4 * KiB, stream(2));  // a stream not captured: ordinary memory
    EXPECT_EQ(other->private_pool, nullptr);
    Block* workspace = pool->allocate(4 * KiB, stream(1), /*graph_pool=*/false);
    EXPECT_EQ(workspace->private_pool, nullptr);
    EXPECT_EQ(workspace->ptr, cached->ptr);
    pool->end_capture(graph, stream(1));
    auto s = pool->stats();
    EXPECT_EQ(s.graph_pools, 1u);
    EXPECT_EQ(s.graph_reserved, 2 * MiB);
    EXPECT_EQ(s.reserved, 6 * MiB);
    pool->free(other);
    pool->free(workspace);
    pool->free(a);
  }
  pool->release_pool(graph, {stream(1)});
  auto s = pool->stats();
  EXPECT_EQ(s.graph_pools, 0u);
  EXPECT_EQ(s.graph_reserved, 0u);
  pool->empty_cache();
  EXPECT_TRUE(device.segments.empty());
}

TEST_F(GraphPoolTest, a_stream_forked_into_the_capture_allocates_from_its_pool) {
  Block* cached = pool->allocate(4 * KiB, stream(2));
  pool->free(cached);
  PrivatePool* graph = pool->create_pool();
  {
    ThreadCaptureScope capturing;
    pool->begin_capture(graph, stream(1));
    device.capturing = {stream(1), stream(2)};  // stream 2 waited on an event of the capture
    Block* side = pool->allocate(4 * KiB, stream(2));
    EXPECT_EQ(side->private_pool, graph);
    EXPECT_NE(side->ptr, cached->ptr);
    Block* plain = pool->allocate(4 * KiB, stream(3));  // not forked: ordinary
    EXPECT_EQ(plain->private_pool, nullptr);
    pool->free(side);
    device.capturing.clear();
    pool->end_capture(graph, stream(1));
    pool->free(plain);  // after the capture: not held
  }
  EXPECT_EQ(pool->stats().pending_blocks, 0u);
  pool->release_pool(graph, {stream(1)});
  EXPECT_EQ(pool->stats().graph_pools, 0u);
}

TEST_F(GraphPoolTest, blocks_freed_in_a_capture_are_reused_by_it_but_by_nothing_else) {
  PrivatePool* graph = pool->create_pool();
  Block* kept = nullptr;
  uintptr_t temporary = 0;
  {
    ThreadCaptureScope capturing;
    pool->begin_capture(graph, stream(1));
    Block* t = pool->allocate(100 * KiB, stream(1));
    temporary = addr(t);
    pool->free(t);  // a temporary of the capture
    kept = pool->allocate(100 * KiB, stream(1));
    EXPECT_EQ(addr(kept), temporary) << "captured work reuses its own freed blocks, in graph order";
    Block* t2 = pool->allocate(100 * KiB, stream(1));
    pool->free(t2);
    pool->end_capture(graph, stream(1));
  }
  // After the capture the pool's free memory (t2) is not handed to ordinary allocations.
  std::vector<Block*> eager;
  for (int i = 0; i < 30; ++i) {
    eager.push_back(pool->allocate(100 * KiB, stream(1)));
    EXPECT_EQ(eager.back()->private_pool, nullptr);
    EXPECT_FALSE(addr(eager.back()) >= temporary && addr(eager.back()) < temporary + 2 * MiB)
        << "an ordinary allocation got memory of the graph's segment";
  }
  for (Block* b : eager) pool->free(b);
  pool->free(kept);  // back to the private pool, still not ordinary
  Block* after = pool->allocate(100 * KiB, stream(1));
  EXPECT_EQ(after->private_pool, nullptr);
  EXPECT_NE(addr(after), temporary);
  pool->free(after);
  pool->release_pool(graph, {stream(1)});
  // Released on its own stream: the segment is ordinary cache now, reusable at once (the lowest address).
  Block* reuse = pool->allocate(1 * MiB, stream(1));
  EXPECT_EQ(addr(reuse), temporary);
  pool->free(reuse);
}

TEST_F(GraphPoolTest, an_ordinary_block_freed_during_a_capture_is_held_until_the_pool_is_released) {
  Block* input = pool->allocate(64 * KiB, stream(1));
  uintptr_t input_address = addr(input);
  PrivatePool* graph = pool->create_pool();
  {
    ThreadCaptureScope capturing;
    pool->begin_capture(graph, stream(1));
    pool->free(input);  // the graph may read it on every replay
    EXPECT_EQ(pool->stats().pending_blocks, 1u);
    pool->end_capture(graph, stream(1));
  }
  Block* b = pool->allocate(64 * KiB, stream(1));
  EXPECT_NE(addr(b), input_address) << "a held block was reused while the graph lives";
  pool->free(b);
  pool->release_pool(graph, {stream(1)});
  EXPECT_EQ(pool->stats().pending_blocks, 0u);
  Block* c = pool->allocate(64 * KiB, stream(1));
  EXPECT_EQ(addr(c), input_address);
  pool->free(c);
}

TEST_F(GraphPoolTest, an_output_of_one_graph_freed_while_capturing_another_is_held_by_the_second) {
  PrivatePool* first = pool->create_pool();
  PrivatePool* second = pool->create_pool();
  ThreadCaptureScope capturing;
  pool->begin_capture(first, stream(1));
  Block* output = pool->allocate(64 * KiB, stream(1));
  pool->end_capture(first, stream(1));
  pool->begin_capture(second, stream(1));
  pool->free(output);  // the second graph may read it
  EXPECT_EQ(pool->stats().pending_blocks, 1u);
  Block* t = pool->allocate(64 * KiB, stream(1));
  EXPECT_EQ(t->private_pool, second);
  pool->free(t);
  pool->end_capture(second, stream(1));
  pool->release_pool(first, {stream(1)});
  EXPECT_EQ(pool->stats().graph_pools, 2u);  // the held output keeps the first pool's segment
  pool->release_pool(second, {stream(1)});
  auto s = pool->stats();
  EXPECT_EQ(s.graph_pools, 0u);
  EXPECT_EQ(s.graph_reserved, 0u);
  EXPECT_EQ(s.pending_blocks, 0u);
}

TEST_F(GraphPoolTest, a_pool_replayed_on_another_stream_is_reused_only_after_that_streams_event) {
  PrivatePool* graph = pool->create_pool();
  uintptr_t segment = 0;
  {
    ThreadCaptureScope capturing;
    pool->begin_capture(graph, stream(1));
    Block* a = pool->allocate(12 * MiB, stream(1));
    segment = addr(a);
    pool->free(a);
    pool->end_capture(graph, stream(1));
  }
  pool->release_pool(graph, {stream(2)});  // replays ran on stream 2
  auto s = pool->stats();
  EXPECT_EQ(s.graph_pools, 0u);
  EXPECT_EQ(s.pending_blocks, 1u);
  Block* early = pool->allocate(12 * MiB, stream(1));
  EXPECT_NE(addr(early), segment) << "reused before the replays on stream 2 were done";
  device.complete_events_on(stream(2));
  Block* late = pool->allocate(12 * MiB, stream(1));
  EXPECT_EQ(addr(late), segment);
  pool->free(early);
  pool->free(late);
}

TEST_F(GraphPoolTest, a_block_alive_at_release_leaves_the_pool_when_freed) {
  PrivatePool* graph = pool->create_pool();
  Block* output = nullptr;
  {
    ThreadCaptureScope capturing;
    pool->begin_capture(graph, stream(1));
    output = pool->allocate(1000, stream(1));  // an array created in the capture, still used afterwards
    pool->end_capture(graph, stream(1));
  }
  pool->release_pool(graph, {stream(1)});
  EXPECT_EQ(pool->stats().graph_pools, 1u);  // its segment is still in use
  pool->free(output);
  EXPECT_EQ(pool->stats().graph_pools, 0u);
  EXPECT_EQ(pool->stats().graph_reserved, 0u);
  pool->empty_cache();
  EXPECT_TRUE(device.segments.empty());
}

TEST_F(GraphPoolTest, the_capturing_thread_neither_queries_nor_records_events) {
  // A block freed before the capture waits for an event on stream 2, which completes during the capture.
  Block* shared = pool->allocate(64 * KiB, stream(3));
  uintptr_t shared_address = addr(shared);
  pool->record_stream(shared, stream(2));
  pool->free(shared);
  device.complete_events_on(stream(2));
  PrivatePool* graph = pool->create_pool();
  {
    ThreadCaptureScope capturing;
    pool->begin_capture(graph, stream(1));
    // Not polled (cudaEventQuery is forbidden to a capturing thread): the block stays pending.
    Block* other = pool->allocate(64 * KiB, stream(3));
    EXPECT_NE(addr(other), shared_address);
    // A captured block used on another stream: its event is deferred until no capture runs.
    Block* a = pool->allocate(4 * KiB, stream(1));
    pool->record_stream(a, stream(2));
    size_t events = device.events.size();
    pool->free(a);
    EXPECT_EQ(device.events.size(), events) << "an event was recorded during the capture";
    pool->end_capture(graph, stream(1));
    EXPECT_EQ(device.events.size(), events) << "recorded while this thread still captures";
    pool->free(other);
  }
  Block* b = pool->allocate(4 * KiB, stream(2));  // not capturing: deferred events are recorded now
  EXPECT_EQ(device.events.size(), 2u);
  Block* again = pool->allocate(64 * KiB, stream(3));  // and pending blocks polled
  EXPECT_EQ(addr(again), shared_address);
  pool->free(b);
  pool->free(again);
  pool->release_pool(graph, {stream(1)});
  device.complete_events_on(stream(2));
  pool->empty_cache();
  EXPECT_EQ(pool->stats().graph_pools, 0u);
}

TEST_F(GraphPoolTest, capture_misuse_throws_value_error_and_oom_in_a_capture_keeps_the_cache) {
  PrivatePool* graph = pool->create_pool();
  PrivatePool* other = pool->create_pool();
  Block* output = nullptr;
  {
    ThreadCaptureScope capturing;
    pool->begin_capture(graph, stream(1));
    EXPECT_THROW(pool->begin_capture(graph, stream(2)), kiln::ValueError);  // the pool is busy
    EXPECT_THROW(pool->begin_capture(other, stream(1)), kiln::ValueError);  // the stream is routed
    try {
      pool->empty_cache();
      ADD_FAILURE() << "empty_cache during a capture must throw";
    } catch (const kiln::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("after the capture"), std::string::npos) << e.what();
    }
    output = pool->allocate(512, stream(1));
    device.capacity = 8 * MiB;
    Block* cached = pool->allocate(4 * MiB, stream(2));  // ordinary, cached once freed
    pool->free(cached);
    try {
      (void)pool->allocate(6 * MiB, stream(1));
      ADD_FAILURE() << "expected OutOfMemoryError";
    } catch (const kiln::OutOfMemoryError& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA graph capture is under way"), std::string::npos) << e.what();
    }
    EXPECT_EQ(device.releases, 0u) << "cudaFree during a capture";
    pool->end_capture(graph, stream(1));
  }
  pool->release_pool(graph, {stream(1)});  // `output` keeps it alive
  EXPECT_THROW(pool->begin_capture(graph, stream(1)), kiln::ValueError);  // released
  pool->free(output);
  pool->release_pool(other, {});
  EXPECT_EQ(pool->stats().graph_pools, 0u);
}

}  // namespace
#endif  // KILN_WITH_CUDA
