// Streams and events on a GPU: creation options, the per-thread current
// stream and StreamGuard, query/synchronize, event timing of real work and
// cross-stream ordering with Event::wait (checked against the host data the
// copies carry). GPU tests skip without a GPU; error tests for a machine
// without one run everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/device_runtime.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace {

using namespace kiln;

TEST(CudaStream, streams_and_events_of_a_missing_gpu_throw_device_error) {
  if (num_gpus() > 0) GTEST_SKIP() << "this machine has a GPU: cuda:0 exists";
  Device missing{DeviceType::CUDA, 0};
  EXPECT_THROW((void)Stream::create(missing), DeviceError);
  EXPECT_THROW((void)Event::create(missing), DeviceError);
  try {
    (void)Stream::current(missing);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("Stream::current"), std::string::npos) << e.what();
  }
}

TEST(CudaStream, the_current_stream_starts_as_the_default_stream) {
  KILN_REQUIRE_GPU();
  std::thread([] {
    EXPECT_EQ(Stream::current(gpu(0)), Stream::default_stream(gpu(0)));
    EXPECT_EQ(Stream::current(gpu(0)).handle(), nullptr);
  }).join();
}

TEST(CudaStream, created_streams_are_distinct_and_accept_any_priority) {
  KILN_REQUIRE_GPU();
  Stream a = Stream::create(gpu(0));
  Stream b = Stream::create(gpu(0), {.non_blocking = true});
  Stream high = Stream::create(gpu(0), {.priority = -1000});  // clamped to the device's range
  Stream low = Stream::create(gpu(0), {.priority = 1000});
  EXPECT_NE(a.handle(), nullptr);
  EXPECT_NE(a.handle(), b.handle());
  EXPECT_NE(high.handle(), low.handle());
  EXPECT_EQ(a.device(), gpu(0));
  EXPECT_TRUE(a.query());  // nothing queued
  a.synchronize();
  EXPECT_NE(a.str().find("cuda:0"), std::string::npos);
}

TEST(CudaStream, stream_guard_sets_and_restores_the_current_stream) {
  KILN_REQUIRE_GPU();
  Stream outer = Stream::create(gpu(0));
  Stream inner = Stream::create(gpu(0));
  Stream before = Stream::current(gpu(0));
  {
    StreamGuard g1(outer);
    EXPECT_EQ(Stream::current(gpu(0)), outer);
    {
      StreamGuard g2(inner);
      EXPECT_EQ(Stream::current(gpu(0)), inner);
    }
    EXPECT_EQ(Stream::current(gpu(0)), outer);
  }
  EXPECT_EQ(Stream::current(gpu(0)), before);
}

TEST(CudaStream, the_current_stream_is_per_thread) {
  KILN_REQUIRE_GPU();
  Stream s = Stream::create(gpu(0));
  StreamGuard g(s);
  void* seen_elsewhere = reinterpret_cast<void*>(1);
  std::thread([&] { seen_elsewhere = Stream::current(gpu(0)).handle(); }).join();
  EXPECT_EQ(seen_elsewhere, nullptr);
  EXPECT_EQ(Stream::current(gpu(0)), s);
}

TEST(CudaEvent, elapsed_time_of_real_work_is_positive) {
  KILN_REQUIRE_GPU();
  Stream s = Stream::create(gpu(0));
  Array p = empty({64 << 20}, uint8, cpu(), {.pinned = true});
  std::memset(p.data_ptr(), 1, 64 << 20);
  Event start = Event::create(gpu(0)), end = Event::create(gpu(0));
  start.record(s);
  Array g = p.to(gpu(0), s, {.non_blocking = true});  // 64 MiB over PCIe: well above a microsecond
  end.record(s);
  float ms = start.elapsed_ms(end);
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
  EXPECT_TRUE(end.query());
  EXPECT_TRUE(s.query());
}

TEST(CudaEvent, events_without_timing_refuse_elapsed_time) {
  KILN_REQUIRE_GPU();
  Event a = Event::create(gpu(0), /*timing=*/false), b = Event::create(gpu(0), false);
  a.record();
  b.record();
  b.synchronize();
  EXPECT_TRUE(b.query());
  try {
    (void)a.elapsed_ms(b);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("timing"), std::string::npos) << e.what();
  }
}

TEST(CudaEvent, wait_orders_work_across_streams) {
  KILN_REQUIRE_GPU();
  // s1 uploads a large array; s2 downloads it after waiting on an event recorded on s1. Without the
  // wait, s2 could read the buffer before the upload lands.
  const int64_t n = 32 << 20;  // 128 MiB of int32
  Array host = empty({n}, int32, cpu(), {.pinned = true});
  auto* h = static_cast<int32_t*>(host.data_ptr());
  std::iota(h, h + n, 0);
  Stream s1 = Stream::create(gpu(0), {.non_blocking = true});
  Stream s2 = Stream::create(gpu(0), {.non_blocking = true});
  Array g = empty({n}, int32, gpu(0));
  g.record_stream(s1);
  g.record_stream(s2);
  detail::DeviceRuntime& runtime = detail::runtime_for(gpu(0));
  runtime.transfer(host, g, &s1, /*non_blocking=*/true);
  Event uploaded = Event::create(gpu(0), false);
  uploaded.record(s1);
  uploaded.wait(s2);
  Array out = empty({n}, int32, cpu(), {.pinned = true});
  runtime.transfer(g, out, &s2, /*non_blocking=*/true);
  s2.synchronize();
  auto* o = static_cast<const int32_t*>(out.data_ptr());
  EXPECT_EQ(o[0], 0);
  EXPECT_EQ(o[n / 2], n / 2);
  EXPECT_EQ(o[n - 1], n - 1);
  EXPECT_EQ(0, std::memcmp(o, h, static_cast<size_t>(n) * sizeof(int32_t)));
}

TEST(CudaEvent, events_record_on_the_current_stream_by_default) {
  KILN_REQUIRE_GPU();
  Stream s = Stream::create(gpu(0));
  StreamGuard g(s);
  Event e = Event::create(gpu(0));
  e.record();
  e.synchronize();
  EXPECT_TRUE(e.query());
  synchronize(gpu(0));
}

TEST(CudaEvent, an_event_and_a_stream_of_different_devices_are_refused) {
  KILN_REQUIRE_GPU();
  Event e = Event::create(gpu(0));
  EXPECT_THROW(e.record(Stream::create(cpu())), DeviceError);
}

}  // namespace
