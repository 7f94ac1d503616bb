// Tests of the caching device allocator. The pool logic runs here with the fake
// segment source and fake events of fake_segment_source.hpp (no GPU needed); the
// GPU tests check the real allocator through kiln's API and skip without a GPU.
// The private pools of CUDA graphs are tested in test_allocator_graph_pool.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

#ifdef KILN_WITH_CUDA
#include "cuda/allocator.hpp"
#include "cuda/runtime.hpp"
#include "fake_segment_source.hpp"
#include "kiln/cuda.hpp"

namespace {

using kiln::cuda_impl::Block;
using kiln::cuda_impl::CachingAllocator;
using kiln_test::AllocatorTest;
using kiln_test::KiB;
using kiln_test::MiB;
using kiln_test::stream;

TEST_F(AllocatorTest, sizes_round_to_512_and_segments_follow_the_policy) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB + 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(11 * MiB + 512), 12 * MiB);
}

TEST_F(AllocatorTest, freed_block_is_reused_without_a_new_segment) {
  Block* a = pool->allocate(1000, stream(1));
  void* p = a->ptr;
  pool->free(a);
  Block* b = pool->allocate(1000, stream(1));
  EXPECT_EQ(b->ptr, p);
  auto s = pool->stats();
  EXPECT_EQ(device.mallocs, 1u);
  EXPECT_EQ(s.device_mallocs, 1u);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.cache_hits, 1u);
  pool->free(b);
}

TEST_F(AllocatorTest, small_requests_split_one_2mib_segment) {
  Block* a = pool->allocate(100, stream(1));
  Block* b = pool->allocate(600, stream(1));
  Block* c = pool->allocate(512, stream(1));
  EXPECT_EQ(a->size, 512u);
  EXPECT_EQ(b->size, 1024u);
  EXPECT_EQ(addr(b), addr(a) + 512);
  EXPECT_EQ(addr(c), addr(a) + 1536);
  auto s = pool->stats();
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.reserved, 2 * MiB);
  EXPECT_EQ(s.allocated, 2048u);
  EXPECT_EQ(s.requested, 1212u);
  EXPECT_EQ(s.active_blocks, 3u);
  EXPECT_EQ(s.cached_blocks, 1u);  // the rest of the segment
  for (Block* x : {a, b, c}) pool->free(x);
}

TEST_F(AllocatorTest, best_fit_takes_the_smallest_hole_that_fits) {
  Block* a = pool->allocate(8 * KiB, stream(1));
  Block* s1 = pool->allocate(512, stream(1));
  Block* b = pool->allocate(4 * KiB, stream(1));
  Block* s2 = pool->allocate(512, stream(1));
  void* hole4k = b->ptr;
  pool->free(a);  // 8 KiB hole
  pool->free(b);  // 4 KiB hole (the tail of the segment is the largest free block)
  Block* c = pool->allocate(3 * KiB, stream(1));
  EXPECT_EQ(c->ptr, hole4k);
  EXPECT_EQ(c->size, 3 * KiB);
  Block* d = pool->allocate(1 * KiB, stream(1));  // the 1 KiB left of the 4 KiB hole
  EXPECT_EQ(addr(d), reinterpret_cast<uintptr_t>(hole4k) + 3 * KiB);
  for (Block* x : {s1, s2, c, d}) pool->free(x);
}

TEST_F(AllocatorTest, freed_neighbours_coalesce_back_into_the_whole_segment) {
  Block* a = pool->allocate(512, stream(1));
  Block* b = pool->allocate(512, stream(1));
  Block* c = pool->allocate(512, stream(1));
  void* base = a->ptr;
  pool->free(a);
  pool->free(c);
  EXPECT_EQ(pool->stats().cached_blocks, 2u);  // a, and c merged with the tail
  pool->free(b);
  EXPECT_EQ(pool->stats().cached_blocks, 1u);  // everything merged
  Block* whole = pool->allocate(1 * MiB, stream(1));
  EXPECT_EQ(whole->ptr, base);
  EXPECT_EQ(pool->stats().segments, 1u);
  pool->free(whole);
  pool->empty_cache();
  auto s = pool->stats();
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(s.segments, 0u);
  EXPECT_EQ(s.device_frees, 1u);
  EXPECT_TRUE(device.segments.empty());
}

TEST_F(AllocatorTest, medium_requests_share_20mib_segments_and_large_ones_round_to_2mib) {
  Block* a = pool->allocate(5 * MiB, stream(1));
  Block* b = pool->allocate(5 * MiB, stream(1));
  EXPECT_EQ(addr(b), addr(a) + 5 * MiB);
  EXPECT_EQ(pool->stats().reserved, 20 * MiB);
  Block* c = pool->allocate(11 * MiB + 1, stream(1));  // 12 MiB segment; the 10 MiB rest above is too small
  EXPECT_EQ(pool->stats().reserved, 32 * MiB);
  EXPECT_EQ(c->size, 12 * MiB);  // a rest of 1 MiB or less is not split off in the large pool
  EXPECT_EQ(pool->stats().allocated, 22 * MiB);
  EXPECT_EQ(pool->stats().requested, 21 * MiB + 1);
  Block* d = pool->allocate(19 * MiB + 512 * KiB, stream(1));  // 20 MiB segment, rest 0.5 MiB: not split
  EXPECT_EQ(d->size, 20 * MiB);
  EXPECT_EQ(pool->stats().reserved, 52 * MiB);
  for (Block* x : {a, b, c, d}) pool->free(x);
  EXPECT_EQ(pool->stats().allocated, 0u);
  pool->empty_cache();
  EXPECT_TRUE(device.segments.empty());
}

TEST_F(AllocatorTest, a_block_freed_on_one_stream_is_not_given_to_another) {
  Block* a = pool->allocate(4 * KiB, stream(1));
  void* p = a->ptr;
  pool->free(a);
  Block* b = pool->allocate(4 * KiB, stream(2));
  EXPECT_NE(b->ptr, p);
  EXPECT_EQ(device.mallocs, 2u);
  Block* c = pool->allocate(4 * KiB, stream(1));
  EXPECT_EQ(c->ptr, p);
  pool->free(b);
  pool->free(c);
}

TEST_F(AllocatorTest, record_stream_keeps_a_block_until_the_other_streams_event_completes) {
  Block* a = pool->allocate(4 * KiB, stream(1));
  void* p = a->ptr;
  pool->record_stream(a, stream(2));
  pool->record_stream(a, stream(2));  // recorded once
  pool->record_stream(a, stream(1));  // its own stream: nothing to do
  pool->free(a);
  ASSERT_EQ(device.events.size(), 1u);
  EXPECT_EQ(device.events[0].stream, stream(2));
  auto s = pool->stats();
  EXPECT_EQ(s.pending_blocks, 1u);
  EXPECT_EQ(s.allocated, 0u);

  Block* b = pool->allocate(4 * KiB, stream(1));  // the event is not done: a's memory is off limits
  EXPECT_NE(b->ptr, p);
  pool->free(b);
  device.complete_events_on(stream(2));
  Block* c = pool->allocate(4 * KiB, stream(1));  // polled at allocation: a is back in stream 1's pool
  EXPECT_EQ(c->ptr, p);
  EXPECT_TRUE(device.events[0].released);
  EXPECT_EQ(pool->stats().pending_blocks, 0u);
  EXPECT_EQ(device.waits, 0u);  // never blocked
  pool->free(c);
}

TEST_F(AllocatorTest, out_of_room_waits_for_pending_blocks_before_failing) {
  device.capacity = 2 * MiB;
  Block* a1 = pool->allocate(1 * MiB, stream(1));  // a1 and a2 fill the only segment there is room for
  Block* a2 = pool->allocate(1 * MiB, stream(1));
  void* p = a1->ptr;
  pool->record_stream(a1, stream(2));
  pool->free(a1);
  Block* b = pool->allocate(1 * MiB, stream(1));  // no room for a new segment: waits for a1's event
  EXPECT_EQ(device.waits, 1u);
  EXPECT_EQ(b->ptr, p);
  EXPECT_EQ(pool->stats().ooms, 0u);
  pool->free(a2);
  pool->free(b);
}

TEST_F(AllocatorTest, a_failed_malloc_releases_cached_segments_and_retries) {
  device.capacity = 4 * MiB;
  Block* a = pool->allocate(1 * MiB, stream(1));  // 2 MiB small segment
  pool->free(a);                                  // cached
  Block* b = pool->allocate(3 * MiB, stream(1));  // 20 MiB fails, 4 MiB fails, release cache, 4 MiB fits
  EXPECT_EQ(b->size, 4 * MiB);  // the 1 MiB rest is not split off
  auto s = pool->stats();
  EXPECT_EQ(s.alloc_retries, 1u);
  EXPECT_EQ(s.device_frees, 1u);
  EXPECT_EQ(s.reserved, 4 * MiB);
  EXPECT_EQ(s.ooms, 0u);
  pool->free(b);
}

TEST_F(AllocatorTest, the_limit_is_checked_before_malloc_and_oom_names_the_numbers) {
  pool = make(4 * MiB);
  Block* a = pool->allocate(3 * MiB, stream(1));  // 20 MiB segment over the limit; 4 MiB fits
  EXPECT_EQ(pool->stats().reserved, 4 * MiB);
  size_t mallocs = device.mallocs;
  try {
    pool->allocate(1 * MiB, stream(1));
    FAIL() << "expected OutOfMemoryError";
  } catch (const kiln::OutOfMemoryError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuda:7 out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 1.00 MiB (1048576 bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("4.00 MiB (4194304 bytes) allocated"), std::string::npos) << m;  // rest 1 MiB: not split
    EXPECT_NE(m.find("4.00 MiB (4194304 bytes) reserved"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
    EXPECT_NE(m.find("limit: 4.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("raise KILN_GPU_MEMORY_LIMIT"), std::string::npos) << m;
    EXPECT_NE(m.find("free arrays you no longer need"), std::string::npos) << m;
  }
  EXPECT_EQ(device.mallocs, mallocs);  // the limit refused it: cudaMalloc was never called
  auto s = pool->stats();
  EXPECT_EQ(s.ooms, 1u);
  EXPECT_EQ(pool->limit(), 4 * MiB);
  pool->set_limit(0);
  Block* b = pool->allocate(1 * MiB, stream(1));
  pool->free(a);
  pool->free(b);
}

TEST_F(AllocatorTest, device_out_of_memory_message_says_how_to_fix_it) {
  device.capacity = 2 * MiB;
  try {
    pool->allocate(64 * MiB, stream(1));
    FAIL() << "expected OutOfMemoryError";
  } catch (const kiln::OutOfMemoryError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("tried to allocate 64.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("the device has 2.00 MiB (2097152 bytes) free of 2.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("limit: none"), std::string::npos) << m;
    EXPECT_NE(m.find("To fix it"), std::string::npos) << m;
  }
  EXPECT_THROW(pool->allocate(SIZE_MAX, stream(1)), kiln::OutOfMemoryError);
  EXPECT_EQ(pool->stats().ooms, 2u);
}

TEST_F(AllocatorTest, stats_track_allocated_peak_and_reset) {
  Block* a = pool->allocate(3000, stream(1));
  Block* b = pool->allocate(5 * MiB, stream(1));
  auto s = pool->stats();
  EXPECT_EQ(s.allocated, 3072u + 5 * MiB);
  EXPECT_EQ(s.peak_allocated, 3072u + 5 * MiB);
  EXPECT_EQ(s.reserved, 22 * MiB);
  EXPECT_EQ(s.peak_reserved, 22 * MiB);
  pool->free(b);
  s = pool->stats();
  EXPECT_EQ(s.allocated, 3072u);
  EXPECT_EQ(s.peak_allocated, 3072u + 5 * MiB);
  EXPECT_EQ(s.frees, 1u);
  pool->reset_peak();
  EXPECT_EQ(pool->stats().peak_allocated, 3072u);
  pool->empty_cache();  // the large segment goes, the small one is in use
  s = pool->stats();
  EXPECT_EQ(s.reserved, 2 * MiB);
  EXPECT_EQ(s.peak_reserved, 22 * MiB);  // peaks only move on reset
  pool->free(a);
}

TEST_F(AllocatorTest, empty_cache_waits_for_pending_blocks_and_keeps_segments_in_use) {
  Block* a = pool->allocate(512, stream(1));
  Block* b = pool->allocate(512, stream(1));
  Block* big = pool->allocate(12 * MiB, stream(1));
  pool->record_stream(big, stream(3));
  pool->free(big);
  pool->free(a);
  pool->empty_cache();
  EXPECT_EQ(device.waits, 1u);
  EXPECT_EQ(pool->stats().reserved, 2 * MiB);  // b keeps the small segment
  pool->free(b);
  pool->empty_cache();
  EXPECT_EQ(pool->stats().reserved, 0u);
  EXPECT_TRUE(device.segments.empty());
}

TEST_F(AllocatorTest, random_alloc_free_never_overlaps_and_coalesces_completely) {
  std::mt19937 rng(42);
  std::vector<Block*> live;
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      size_t size = rng() % 4 == 0 ? (rng() % (30 * MiB)) : (rng() % (64 * KiB));
      live.push_back(pool->allocate(size, stream(1 + static_cast<int>(rng() % 2))));
    } else {
      size_t i = rng() % live.size();
      pool->free(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 500 == 0) {
      std::vector<std::pair<uintptr_t, size_t>> ranges;
      for (Block* b : live) ranges.emplace_back(addr(b), b->size);
      std::sort(ranges.begin(), ranges.end());
      for (size_t k = 1; k < ranges.size(); ++k)
        ASSERT_LE(ranges[k - 1].first + ranges[k - 1].second, ranges[k].first) << "blocks overlap";
    }
  }
  for (Block* b : live) pool->free(b);
  auto s = pool->stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.active_blocks, 0u);
  EXPECT_EQ(s.cached_blocks, s.segments);  // every segment is one free block again
  pool->empty_cache();
  EXPECT_EQ(pool->stats().reserved, 0u);
  EXPECT_TRUE(device.segments.empty());
}

TEST_F(AllocatorTest, concurrent_threads_allocate_and_free_safely) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([this, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<Block*> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.size() < 8 && rng() % 2) {
          mine.push_back(pool->allocate(rng() % (2 * MiB), stream(1)));
        } else if (!mine.empty()) {
          pool->free(mine.back());
          mine.pop_back();
        }
      }
      for (Block* b : mine) pool->free(b);
    });
  for (auto& th : threads) th.join();
  auto s = pool->stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.allocations, s.frees);
  pool->empty_cache();
  EXPECT_TRUE(device.segments.empty());
}

TEST(MemoryLimit, parses_bytes_units_and_percent) {
  using kiln::cuda_impl::parse_memory_limit;
  EXPECT_EQ(parse_memory_limit("2147483648", 0), 2147483648u);
  EXPECT_EQ(parse_memory_limit("2GB", 0), 2000000000u);
  EXPECT_EQ(parse_memory_limit("512MiB", 0), 512u * 1024 * 1024);
  EXPECT_EQ(parse_memory_limit(" 1.5 gib ", 0), 1610612736u);
  EXPECT_EQ(parse_memory_limit("64k", 0), 65536u);
  EXPECT_EQ(parse_memory_limit("80%", 1000), 800u);
  EXPECT_EQ(parse_memory_limit("12.5%", 80ull << 30), 10ull << 30);
  EXPECT_EQ(parse_memory_limit("", 1000), 0u);
  EXPECT_EQ(parse_memory_limit("0", 1000), 0u);
  EXPECT_EQ(parse_memory_limit("none", 1000), 0u);
}

TEST(MemoryLimit, rejects_malformed_values_with_the_variable_name_and_examples) {
  using kiln::cuda_impl::parse_memory_limit;
  for (const char* bad : {"abc", "12XB", "150%", "0%", "-5", "1.2.3GB", "GB", "99999999999TB"}) {
    try {
      parse_memory_limit(bad, 1000);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const kiln::ValueError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(std::string("KILN_GPU_MEMORY_LIMIT='") + bad + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("\"512MiB\""), std::string::npos) << m;
      EXPECT_NE(m.find("\"80%\""), std::string::npos) << m;
    }
  }
}

TEST(MemoryLimit, format_bytes_gives_units_and_exact_bytes) {
  EXPECT_EQ(kiln::cuda_impl::format_bytes(100), "100 bytes");
  EXPECT_EQ(kiln::cuda_impl::format_bytes(1536), "1.50 KiB (1536 bytes)");
  EXPECT_EQ(kiln::cuda_impl::format_bytes(3u << 30), "3.00 GiB (3221225472 bytes)");
}

TEST(CudaMemoryApi, rejects_the_cpu_and_missing_gpus) {
  try {
    kiln::cuda::memory_stats(kiln::cpu());
    FAIL() << "expected DeviceError";
  } catch (const kiln::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("memory_stats: cpu has no caching allocator"), std::string::npos) << e.what();
  }
  kiln::Device missing{kiln::DeviceType::CUDA, kiln::num_gpus()};
  try {
    kiln::cuda::empty_cache(missing);
    FAIL() << "expected DeviceError";
  } catch (const kiln::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("empty_cache: " + missing.str() + " does not exist"), std::string::npos)
        << e.what();
  }
}

// ---- on a GPU --------------------------------------------------------------------------------

TEST(GpuAllocator, a_freed_array_gives_its_block_to_the_next_array_of_that_size) {
  KILN_REQUIRE_GPU();
  kiln::Device d = kiln::gpu(0);
  void* p = nullptr;
  auto before = kiln::cuda::memory_stats(d);
  {
    kiln::Array a = kiln::empty({1000}, kiln::float32, d);
    p = a.data_ptr();
    auto during = kiln::cuda::memory_stats(d);
    EXPECT_EQ(during.allocated, before.allocated + 4096);  // 4000 bytes rounded up to 512
    EXPECT_EQ(during.active_blocks, before.active_blocks + 1);
    EXPECT_EQ(during.allocations, before.allocations + 1);
  }
  auto after = kiln::cuda::memory_stats(d);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_EQ(after.frees, before.frees + 1);
  kiln::Array b = kiln::empty({1000}, kiln::float32, d);
  EXPECT_EQ(b.data_ptr(), p);
  EXPECT_EQ(kiln::cuda::memory_stats(d).cache_hits, after.cache_hits + 1);
}

TEST(GpuAllocator, empty_cache_returns_unused_segments) {
  KILN_REQUIRE_GPU();
  kiln::Device d = kiln::gpu(0);
  { kiln::Array a = kiln::empty({64 << 20}, kiln::uint8, d); }
  EXPECT_GE(kiln::cuda::memory_stats(d).reserved, size_t{64} << 20);
  kiln::cuda::empty_cache(d);
  auto s = kiln::cuda::memory_stats(d);
  EXPECT_LT(s.reserved - s.allocated, size_t{64} << 20) << "the 64 MiB segment should be gone";
}

TEST(GpuAllocator, the_limit_turns_a_large_request_into_out_of_memory_with_the_numbers) {
  KILN_REQUIRE_GPU();
  kiln::Device d = kiln::gpu(0);
  size_t old_limit = kiln::cuda::memory_limit(d);
  kiln::cuda::empty_cache(d);
  size_t reserved = kiln::cuda::memory_stats(d).reserved;
  kiln::cuda::set_memory_limit(d, reserved + (size_t{64} << 20));
  try {
    kiln::Array big = kiln::empty({int64_t{1} << 30}, kiln::uint8, d);
    ADD_FAILURE() << "expected OutOfMemoryError";
  } catch (const kiln::OutOfMemoryError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuda:0 out of memory: tried to allocate 1.00 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("limit: "), std::string::npos) << m;
    EXPECT_NE(m.find("raise KILN_GPU_MEMORY_LIMIT"), std::string::npos) << m;
  }
  kiln::Array small = kiln::empty({1 << 20}, kiln::uint8, d);  // still fits under the limit
  EXPECT_EQ(small.device(), d);
  kiln::cuda::set_memory_limit(d, old_limit);
}

TEST(GpuAllocator, record_stream_defers_reuse_until_the_stream_is_done) {
  KILN_REQUIRE_GPU();
  kiln::Device d = kiln::gpu(0);
  kiln::Stream s = kiln::Stream::create(d);
  kiln::Array a = kiln::empty({12345}, kiln::float32, d);
  void* p = a.data_ptr();
  a.record_stream(s);
  kiln_test::spin(s, 0.2);  // keep s busy for 200 ms of GPU time, whatever the GPU's speed
  size_t pending_before = kiln::cuda::memory_stats(d).pending_blocks;
  a = kiln::Array();  // its memory waits for the event recorded on s now
  EXPECT_EQ(kiln::cuda::memory_stats(d).pending_blocks, pending_before + 1);
  kiln::Array b = kiln::empty({12345}, kiln::float32, d);
  EXPECT_NE(b.data_ptr(), p);  // not handed out while s may still use it
  s.synchronize();             // the event recorded at free is complete now
  EXPECT_EQ(kiln::cuda::memory_stats(d).pending_blocks, 0u);  // memory_stats collects completed events
  kiln::Array c = kiln::empty({12345}, kiln::float32, d);
  EXPECT_EQ(c.data_ptr(), p);
}

}  // namespace
#endif  // KILN_WITH_CUDA
