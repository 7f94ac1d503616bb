// kiln::bench, Timer and the sync/transfer accounting on a GPU: event times
// against a kernel that spins for a known time (%globaltimer, nanoseconds),
// GPUs found from the work queued, syncs and copies counted for item(),
// to_vector(), printing and pageable copies, none for a device-only loop, and
// error mode. The spin kernel's NVRTC compile runs without a GPU; the rest skips.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "cuda/compiler.hpp"
#include "cuda/launch.hpp"
#include "cuda/runtime.hpp"
#include "kiln/cuda.hpp"
#include "gpu_test_util.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace {

using namespace kiln;
using kiln_test::expect_error;
using kiln_test::kSpinSource;
using kiln_test::spin;

TEST(BenchGpu, spin_kernel_compiles_to_ptx_without_a_gpu) {
  std::string ptx = cuda_impl::compile_ptx(kSpinSource, "kiln_spin.cu", 90);
  EXPECT_NE(ptx.find("kiln_spin"), std::string::npos);
  EXPECT_NE(ptx.find("globaltimer"), std::string::npos);
}

TEST(BenchGpu, event_time_matches_a_known_kernel_duration) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  BenchResult r = bench("spin 5 ms", [&] { spin(d, 5e-3); }, {.warmup = 2, .repeat = 10});
  ASSERT_EQ(r.device_seconds.size(), 1u) << "the GPU the function launched on is timed by default";
  EXPECT_EQ(r.device_seconds[0].device, d);
  Stats ev = r.device(d);
  EXPECT_GE(ev.median, 4.95e-3);  // the GPU timer and the event clock may differ by a few microseconds
  EXPECT_LT(ev.median, 5.5e-3);
  // The host clock stops after the synchronisation: never shorter than the device work.
  for (int i = 0; i < r.repeats(); ++i)
    EXPECT_GE(r.host_seconds[static_cast<size_t>(i)], r.device_seconds[0].seconds[static_cast<size_t>(i)] - 1e-5);
  EXPECT_DOUBLE_EQ(r.seconds(), ev.median);
}

TEST(BenchGpu, cpu_function_on_a_gpu_machine_times_no_gpu) {
  KILN_REQUIRE_GPU();
  BenchResult r = bench([] {}, {.warmup = 1, .repeat = 3});
  EXPECT_TRUE(r.device_seconds.empty());
  BenchResult all = bench([] {}, {.warmup = 0, .repeat = 2});
  EXPECT_EQ(static_cast<int>(all.device_seconds.size()), num_gpus()) << "warmup 0: every GPU is timed";
}

TEST(BenchGpu, flush_l2_keeps_the_timed_region_clean) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  BenchResult r = bench([&] { spin(d, 1e-3); }, {.warmup = 1, .repeat = 5, .devices = {d}, .flush_l2 = true});
  EXPECT_GE(r.device(d).median, 1e-3);
  EXPECT_LT(r.device(d).median, 1.5e-3);
}

TEST(BenchGpu, only_the_gpu_the_function_uses_is_timed) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs two GPUs, this machine has " << num_gpus();
  BenchResult r = bench([&] { spin(gpu(1), 1e-3); }, {.warmup = 1, .repeat = 3});
  ASSERT_EQ(r.device_seconds.size(), 1u);
  EXPECT_EQ(r.device_seconds[0].device, gpu(1));
  EXPECT_GE(r.device(gpu(1)).median, 0.99e-3);
}

TEST(BenchGpu, two_gpus_are_both_timed) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs two GPUs, this machine has " << num_gpus();
  BenchResult r = bench(
      [&] {
        spin(gpu(0), 2e-3);
        spin(gpu(1), 4e-3);
      },
      {.warmup = 1, .repeat = 5});
  ASSERT_EQ(r.device_seconds.size(), 2u);
  EXPECT_NEAR(r.device(gpu(0)).median, 2e-3, 0.5e-3);
  EXPECT_NEAR(r.device(gpu(1)).median, 4e-3, 0.5e-3);
  EXPECT_GE(r.host().median, 4e-3);  // both ran at once: about the longer one, not the sum
  EXPECT_LT(r.host().median, 5.5e-3);
}

TEST(BenchGpu, a_graph_replay_is_timed_on_its_gpu_by_default) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  spin(d, 1e-4);  // load the module before the capture
  synchronize(d);
  Stream s = Stream::create(d);  // a blocking stream: ordered with the events on the default stream
  cuda::Graph g;
  {
    cuda::GraphCapture capture(g, s);
    spin(d, 2e-3);
  }
  // No devices given: bench must find the GPU the replay runs on, synchronise it and time it.
  BenchResult r = bench([&] { g.replay(); }, {.warmup = 1, .repeat = 5});
  ASSERT_EQ(r.device_seconds.size(), 1u);
  EXPECT_EQ(r.device_seconds[0].device, d);
  EXPECT_GE(r.device(d).median, 1.99e-3);
  EXPECT_LT(r.device(d).median, 2.5e-3);
  EXPECT_GE(r.host().median, 1.99e-3) << "the host clock stops only after the replay is done";
}

TEST(TimerGpu, records_without_stalling_and_reads_later) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  spin(d, 1e-3);  // load the module
  synchronize(d);
  Timer t(d);
  const auto host0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    ScopedTimer s(t);
    spin(d, 2e-3);
  }
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - host0).count();
  EXPECT_LT(host_s, 5e-3) << "start/stop only record events: the host does not wait for the 6 ms of work";
  std::vector<double> ms = t.times_ms();
  ASSERT_EQ(ms.size(), 3u);
  for (double m : ms) {
    EXPECT_GE(m, 2.0);
    EXPECT_LT(m, 2.5);
  }
  EXPECT_NEAR(t.elapsed_ms(), ms[0] + ms[1] + ms[2], 1e-9);
}

TEST(TimerGpu, times_a_given_stream) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Stream s = Stream::create(d, {.non_blocking = true});
  Timer t(s);
  t.start();
  {
    StreamGuard g(s);
    spin(d, 3e-3);
  }
  t.stop();
  EXPECT_GE(t.elapsed_ms(), 3.0);
  EXPECT_LT(t.elapsed_ms(), 3.5);
}

TEST(SyncDebugGpu, item_to_vector_printing_and_pageable_copies_are_counted) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Array x = arange(0, 1000, 1, float32, d);
  synchronize(d);
  SyncDebugGuard guard(SyncDebugMode::off);
  EXPECT_EQ(x.sum().item<float>(), 499500.0f);
  SyncCounters c = guard.counters();
  EXPECT_EQ(c.syncs, 1u);
  EXPECT_EQ(c.d2h_copies, 1u);
  EXPECT_EQ(c.d2h_bytes, 4u);
  EXPECT_EQ(x.to_vector<float>().size(), 1000u);
  c = guard.counters();
  EXPECT_EQ(c.syncs, 2u);
  EXPECT_EQ(c.d2h_bytes, 4004u);
  std::ostringstream out;
  out << x;
  EXPECT_EQ(guard.counters().syncs, 3u);
  Array h = ones({256}, float32, cpu());
  Array g = h.to(d);  // pageable host memory: the host waits
  c = guard.counters();
  EXPECT_EQ(c.h2d_copies, 1u);
  EXPECT_EQ(c.h2d_bytes, 1024u);
  EXPECT_EQ(c.syncs, 4u);
  Array p = h.pin_memory();
  Array g2 = empty({256}, float32, d);
  g2.copy_from(p, {.non_blocking = true});  // pinned and asynchronous: a copy, no sync
  c = guard.counters();
  EXPECT_EQ(c.h2d_copies, 2u);
  EXPECT_EQ(c.syncs, 4u);
  synchronize(d);
  EXPECT_EQ(guard.counters().explicit_syncs, c.explicit_syncs + 1);
}

TEST(SyncDebugGpu, a_device_only_loop_makes_zero_syncs) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Array w = random::normal({64, 64}, 0.0, 0.1, float32, d), x = random::normal({64, 64}, float32, d);
  Array log = zeros({100}, float32, d);
  (void)tanh(matmul(x, w));                    // compile outside the guard (compiling is not a sync either way)
  SyncDebugGuard guard(SyncDebugMode::error);  // any implicit sync would throw
  for (int i = 0; i < 100; ++i) {
    x = tanh(matmul(x, w));
    log.index({i}).assign(linalg::norm(x));
  }
  SyncCounters c = guard.counters();
  EXPECT_EQ(c.syncs, 0u);
  EXPECT_EQ(c.h2d_copies + c.d2h_copies, 0u);
}

TEST(SyncDebugGpu, error_mode_throws_naming_the_op_and_warn_prints_it) {
  KILN_REQUIRE_GPU();
  Array x = ones({4}, float32, gpu(0));
  {
    SyncDebugGuard guard(SyncDebugMode::error);
    expect_error<Error>([&] { (void)x.sum().item<float>(); },
                        {"implicit synchronisation in item()", "cuda:0", "4 bytes D2H"});
    expect_error<Error>([&] { (void)x.to_vector<float>(); }, {"to_vector()", "16 bytes D2H"});
    expect_error<Error>([&] { (void)x.str(); }, {"printing"});
    expect_error<Error>([&] { (void)x.to(cpu()); }, {"to()"});
  }
  SyncDebugGuard guard(SyncDebugMode::warn);
  testing::internal::CaptureStderr();
  EXPECT_EQ(x.sum().item<float>(), 4.0f);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "kiln: implicit synchronisation in item() on cuda:0 (4 bytes D2H)\n");
}

}  // namespace

#endif  // KILN_WITH_CUDA
