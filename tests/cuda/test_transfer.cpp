// Transfer tests: every direction (host->GPU, GPU->host, GPU->GPU on one and
// on two GPUs), pinned and pageable host memory, both pageable copy paths
// (through the driver for small copies, staged through pinned chunks for large ones),
// non-contiguous sources, identity moves, empty arrays, and the errors. Each
// result is checked against the host data it came from. GPU tests skip
// without a GPU; the error tests for a machine without one run everywhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/device_runtime.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"
#ifdef KILN_WITH_CUDA
#include "gpu_test_util.hpp"
#include "kiln/cuda.hpp"
#endif

namespace {

using namespace kiln;

std::vector<int32_t> iota_values(int64_t n, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Bytes that differ from their neighbours and from an all-zero or shifted copy.
std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  uint32_t x = 12345;
  for (auto& b : v) {
    x = x * 1103515245u + 12345u;
    b = static_cast<uint8_t>(x >> 16);
  }
  return v;
}

TEST(Transfer, to_a_missing_gpu_throws_device_error_naming_it) {
  if (num_gpus() > 0) GTEST_SKIP() << "this machine has a GPU: the missing-GPU error cannot be provoked on cuda:0";
  Array a = from_data(std::vector<float>{1, 2, 3});
  try {
    (void)a.to(Device{DeviceType::CUDA, 0});
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("gpu(0)"), std::string::npos) << m;
    EXPECT_NE(m.find("try_gpu"), std::string::npos) << m;
  }
}

TEST(Transfer, pinned_memory_without_a_gpu_throws_device_error) {
  if (num_gpus() > 0) GTEST_SKIP() << "this machine has a GPU: pinned memory works here";
  try {
    (void)empty({4}, float32, cpu(), {.pinned = true});
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("pinned"), std::string::npos) << e.what();
  }
}

TEST(Transfer, host_to_gpu_and_back_round_trips_pageable_data) {
  KILN_REQUIRE_GPU();
  std::vector<int32_t> host = iota_values(1000, -500);
  Array g = from_data(host, Shape{10, 100}, gpu(0));
  EXPECT_EQ(g.device(), gpu(0));
  EXPECT_EQ(g.shape(), (Shape{10, 100}));
  EXPECT_EQ(g.dtype(), int32);
  Array back = g.to(cpu());
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_FALSE(back.is_pinned());
  EXPECT_EQ(back.to_vector<int32_t>(), host);
  EXPECT_EQ(g.to_vector<int32_t>(), host);  // to_vector of a GPU array copies and synchronises
  EXPECT_EQ(g.index({3, 7}).item<int32_t>(), 3 * 100 + 7 - 500);
}

TEST(Transfer, every_dtype_round_trips_bit_exactly) {
  KILN_REQUIRE_GPU();
  for (DType t : {kiln::bool_, int8, uint8, int16, int32, int64, float16, bfloat16, float32, float64}) {
    size_t n = 257 * itemsize(t);
    std::vector<uint8_t> bytes = pattern(n);
    if (t == kiln::bool_)
      for (auto& b : bytes) b &= 1;
    Array h = from_data(bytes.data(), Shape{257}, t, cpu());
    Array back = h.to(gpu(0)).to(cpu());
    ASSERT_EQ(back.dtype(), t);
    std::vector<uint8_t> got(static_cast<const uint8_t*>(back.data_ptr()),
                             static_cast<const uint8_t*>(back.data_ptr()) + n);
    EXPECT_EQ(got, bytes) << dtype_name(t);
  }
}

TEST(Transfer, large_pageable_copies_take_the_staged_path_and_stay_exact) {
  KILN_REQUIRE_GPU();
  // 70 MiB + 123 bytes: more than two 32 MiB staging chunks, and a ragged last chunk.
  size_t n = (size_t{70} << 20) + 123;
  std::vector<uint8_t> bytes = pattern(n);
  Array h = from_data(bytes.data(), Shape{static_cast<int64_t>(n)}, uint8, cpu());
  Array g = h.to(gpu(0));
  Array back = g.to(cpu());
  ASSERT_EQ(back.nbytes(), static_cast<int64_t>(n));
  EXPECT_EQ(0, std::memcmp(back.data_ptr(), bytes.data(), n));
  // A middle slice proves the device copy itself (not just the round trip) holds the data.
  Array mid = g.slice(0, 40 << 20, (40 << 20) + 8).to(cpu());
  EXPECT_EQ(mid.to_vector<uint8_t>(), std::vector<uint8_t>(bytes.begin() + (40 << 20), bytes.begin() + (40 << 20) + 8));
}

TEST(Transfer, pinned_host_memory_copies_asynchronously_on_a_stream) {
  KILN_REQUIRE_GPU();
  Array p = empty({1 << 20}, int32, cpu(), {.pinned = true});
  EXPECT_TRUE(p.is_pinned());
  EXPECT_TRUE(p.device().is_cpu());
  std::vector<int32_t> values = iota_values(1 << 20, 7);
  std::memcpy(p.data_ptr(), values.data(), values.size() * sizeof(int32_t));
  Stream s = Stream::create(gpu(0), {.non_blocking = true});
  Array g = p.to(gpu(0), s, {.non_blocking = true});
  s.synchronize();
  EXPECT_EQ(g.to_vector<int32_t>(), values);
}

#ifdef KILN_WITH_CUDA
TEST(Transfer, the_default_stream_given_explicitly_is_used_under_another_stream_guard) {
  KILN_REQUIRE_GPU();
  std::vector<int32_t> values = iota_values(1 << 16, 11);
  Array p = empty({1 << 16}, int32, cpu(), {.pinned = true});
  std::memcpy(p.data_ptr(), values.data(), values.size() * sizeof(int32_t));
  // s does not synchronise with the legacy default stream (non-blocking) and stays busy for 200 ms: a copy
  // on the default stream runs now; one wrongly queued on s would wait behind the spin.
  Stream s = Stream::create(gpu(0), {.non_blocking = true});
  Stream legacy = Stream::default_stream(gpu(0));
  StreamGuard guard(s);
  // The result is allocated on the current stream s: a zeroed block of its size cached there first, so the
  // copy takes it (no device allocation while s spins) and a copy queued behind the spin would read zeros.
  { Array zeroed = zeros({1 << 16}, int32, gpu(0)); }
  s.synchronize();
  kiln_test::spin(s, 0.2);
  Array g = p.to(gpu(0), legacy, {.non_blocking = true});
  EXPECT_EQ(Stream::current(gpu(0)), s);  // the copy's stream is current only for the copy
  legacy.synchronize();
  EXPECT_FALSE(s.query()) << "s finished its 200 ms spin: the copy waited behind it";
  EXPECT_EQ(g.to(cpu(), legacy).to_vector<int32_t>(), values);  // read on legacy, not behind s
  EXPECT_FALSE(s.query()) << "s finished its 200 ms spin before the check: it proves nothing";
  s.synchronize();  // the next test starts on an idle GPU
}
#endif

TEST(Transfer, gpu_to_pinned_host_is_asynchronous_until_the_stream_is_synchronised) {
  KILN_REQUIRE_GPU();
  std::vector<int32_t> values = iota_values(300000, -3);
  Array g = from_data(values, {}, gpu(0));
  Array p = empty({300000}, int32, cpu(), {.pinned = true});
  Stream s = Stream::create(gpu(0));
  detail::runtime_for(gpu(0)).transfer(g, p, &s, /*non_blocking=*/true);
  s.synchronize();
  std::vector<int32_t> got(static_cast<int32_t*>(p.data_ptr()), static_cast<int32_t*>(p.data_ptr()) + 300000);
  EXPECT_EQ(got, values);
}

TEST(Transfer, pin_memory_copies_into_a_reused_pinned_buffer) {
  KILN_REQUIRE_GPU();
  Array h = from_data(std::vector<double>{1.5, -2.25, 3.0});
  Array p = h.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_FALSE(p.shares_storage(h));
  EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{1.5, -2.25, 3.0}));
  EXPECT_TRUE(p.pin_memory().shares_storage(p));  // already pinned: itself
#ifdef KILN_WITH_CUDA
  void* first = p.data_ptr();
  p = Array();
  auto before = cuda::host_memory_stats();
  Array q = empty({3}, float64, cpu(), {.pinned = true});
  EXPECT_EQ(q.data_ptr(), first);  // the same size class comes back from the pool
  EXPECT_EQ(cuda::host_memory_stats().cache_hits, before.cache_hits + 1);
#endif
}

TEST(Transfer, non_contiguous_host_sources_arrive_in_logical_order) {
  KILN_REQUIRE_GPU();
  Array h = from_data(iota_values(12), Shape{3, 4});
  Array t = h.transpose();  // (4, 3), strides (1, 4)
  ASSERT_FALSE(t.is_contiguous());
  Array g = t.to(gpu(0));
  EXPECT_EQ(g.shape(), (Shape{4, 3}));
  EXPECT_EQ(g.to_vector<int32_t>(), (std::vector<int32_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  Array every_other = from_data(iota_values(10)).slice(0, 1, 10, 2);
  EXPECT_EQ(every_other.to(gpu(0)).to_vector<int32_t>(), (std::vector<int32_t>{1, 3, 5, 7, 9}));
}

TEST(Transfer, non_contiguous_gpu_sources_arrive_in_logical_order) {
  KILN_REQUIRE_GPU();
  Array g = from_data(iota_values(12), Shape{3, 4}, gpu(0));
  Array back = g.transpose().to(cpu());  // needs the GPU copy kernel to make it contiguous first
  EXPECT_EQ(back.to_vector<int32_t>(), (std::vector<int32_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
}

TEST(Transfer, to_the_same_device_returns_the_same_storage) {
  KILN_REQUIRE_GPU();
  Array g = from_data(std::vector<float>{1, 2, 3}, {}, gpu(0));
  Array same = g.to(gpu(0));
  EXPECT_TRUE(same.shares_storage(g));
  EXPECT_EQ(same.data_ptr(), g.data_ptr());
  Stream s = Stream::create(gpu(0));
  EXPECT_TRUE(g.to(gpu(0), s).shares_storage(g));
}

TEST(Transfer, empty_arrays_move_in_both_directions) {
  KILN_REQUIRE_GPU();
  Array h = empty({0, 3}, float32);
  Array g = h.to(gpu(0));
  EXPECT_EQ(g.device(), gpu(0));
  EXPECT_EQ(g.shape(), (Shape{0, 3}));
  EXPECT_EQ(g.size(), 0);
  Array back = g.to(cpu());
  EXPECT_EQ(back.shape(), (Shape{0, 3}));
  EXPECT_TRUE(back.to_vector<float>().empty());
}

TEST(Transfer, gpu_to_gpu_on_one_device_copies_the_data) {
  KILN_REQUIRE_GPU();
  std::vector<int32_t> values = iota_values(5000, 11);
  Array a = from_data(values, {}, gpu(0));
  Array b = empty({5000}, int32, gpu(0));
  detail::runtime_for(gpu(0)).transfer(a, b);
  EXPECT_FALSE(b.shares_storage(a));
  EXPECT_EQ(b.to_vector<int32_t>(), values);
}

TEST(Transfer, gpu_to_gpu_between_devices_copies_the_data) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << num_gpus();
  std::vector<int32_t> values = iota_values(3 << 20, -9);
  Array a = from_data(values, {}, gpu(0));
  Array b = a.to(gpu(1));
  EXPECT_EQ(b.device(), gpu(1));
  EXPECT_EQ(b.to_vector<int32_t>(), values);
  Stream s1 = Stream::create(gpu(1));
  Array c = b.to(gpu(0), s1);  // ordered on a stream of the destination
  s1.synchronize();
  EXPECT_EQ(c.to_vector<int32_t>(), values);
}

TEST(Transfer, a_stream_of_a_third_device_is_refused) {
  KILN_REQUIRE_GPU();
  Array h = from_data(std::vector<float>{1, 2});
  Stream host_stream = Stream::create(cpu());
  if (num_gpus() < 2) {
    // A cpu stream is a stream of the source side: accepted.
    EXPECT_EQ(h.to(gpu(0), host_stream).to_vector<float>(), (std::vector<float>{1, 2}));
    return;
  }
  Stream other = Stream::create(gpu(1));
  EXPECT_THROW((void)h.to(gpu(0), other), DeviceError);
}

TEST(Transfer, operands_on_two_devices_throw_device_error_naming_both) {
  KILN_REQUIRE_GPU();
  Array g = from_data(std::vector<float>{1, 2, 3}, {}, gpu(0));
  Array h = from_data(std::vector<float>{1, 2, 3});
  try {
    (void)(g + h);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu"), std::string::npos) << m;
    EXPECT_NE(m.find(".to("), std::string::npos) << m;
  }
}

}  // namespace
