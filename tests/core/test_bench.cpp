// kiln::bench, Timer and the sync/transfer accounting on the CPU: statistics
// against hand-computed values, warm-up/repeat/max_seconds honoured (calls
// counted), host times bounded below by sleeps, JSON parsed back, and the
// accounting hooks driven directly (the GPU side is in tests/cuda/test_bench_gpu.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include "core/sync_debug.hpp"
#include "json_mini.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace {

using namespace kiln;
using kiln_test::expect_error;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(Bench, summarize_matches_hand_computed_statistics) {
  Stats s = summarize({3.0, 1.0, 2.0, 4.0});
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 4.0);
  EXPECT_DOUBLE_EQ(s.median, 2.5);  // mean of the middle two
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_NEAR(s.stddev, std::sqrt(1.25), 1e-15);  // population: (2.25+0.25+0.25+2.25)/4
  Stats odd = summarize({5.0, 1.0, 3.0});
  EXPECT_DOUBLE_EQ(odd.median, 3.0);
  EXPECT_NEAR(odd.stddev, std::sqrt(8.0 / 3.0), 1e-15);
  Stats one = summarize({0.5});
  EXPECT_DOUBLE_EQ(one.median, 0.5);
  EXPECT_DOUBLE_EQ(one.stddev, 0.0);
  EXPECT_EQ(summarize({}).count, 0);
}

TEST(Bench, honours_warmup_and_repeat_counts) {
  int calls = 0;
  BenchResult r = bench([&] { ++calls; }, {.warmup = 2, .repeat = 5});
  EXPECT_EQ(calls, 7);
  EXPECT_EQ(r.repeats(), 5);
  EXPECT_EQ(r.warmup, 2);
  EXPECT_EQ(r.host_seconds.size(), 5u);
  EXPECT_TRUE(r.device_seconds.empty()) << "a CPU-only function touches no GPU";
  calls = 0;
  (void)bench([&] { ++calls; }, {.warmup = 0, .repeat = 1});
  EXPECT_EQ(calls, 1);
}

TEST(Bench, host_time_covers_the_call) {
  BenchResult r = bench("sleep", [] { sleep_ms(5); }, {.warmup = 1, .repeat = 3});
  ASSERT_EQ(r.repeats(), 3);
  for (double t : r.host_seconds) EXPECT_GE(t, 0.005);
  EXPECT_GE(r.host().min, 0.005);
  EXPECT_DOUBLE_EQ(r.seconds(), r.host().median);  // no GPU timed: the host median
}

TEST(Bench, max_seconds_caps_the_repeats) {
  int calls = 0;
  BenchResult r = bench(
      [&] {
        ++calls;
        sleep_ms(20);
      },
      {.warmup = 1, .repeat = 1000, .max_seconds = 0.05});
  EXPECT_GE(r.repeats(), 1);
  EXPECT_LE(r.repeats(), 3);  // stops once 50 ms of 20 ms calls have run
  EXPECT_EQ(calls, 1 + r.repeats());
}

TEST(Bench, cpu_devices_are_ignored_and_flush_l2_runs_outside_the_timing) {
  int calls = 0;
  // max_seconds counts the flushes too (twice the L3 cache per repeat, slow under the sanitizers): no cap here.
  BenchResult r =
      bench([&] { ++calls; }, {.warmup = 1, .repeat = 4, .max_seconds = 1e9, .devices = {cpu()}, .flush_l2 = true});
  EXPECT_EQ(calls, 5);
  EXPECT_TRUE(r.device_seconds.empty());
  // Writing tens of MB between repeats must not land in the timed region of a trivial call.
  EXPECT_LT(r.host().median, 1e-3);
}

TEST(Bench, bad_options_throw_value_error) {
  expect_error<ValueError>([] { (void)bench([] {}, {.warmup = -1}); }, {"warmup=-1", "warmup >= 0"});
  expect_error<ValueError>([] { (void)bench([] {}, {.repeat = 0}); }, {"repeat=0"});
  expect_error<ValueError>([] { (void)bench([] {}, {.max_seconds = 0}); }, {"max_seconds"});
  expect_error<ValueError>([] { (void)bench(std::function<void()>{}); }, {"bench", "empty"});
  // Host time only ({cpu()}): with warmup 0 and no devices given, a GPU machine would time every GPU.
  BenchResult r = bench([] {}, {.warmup = 0, .repeat = 2, .devices = {cpu()}});
  expect_error<ValueError>([&] { (void)r.device(Device{DeviceType::CUDA, 0}); }, {"cuda:0", "was not timed", "none"});
}

TEST(Bench, bench_propagates_exceptions_of_the_function) {
  EXPECT_THROW((void)bench([] { throw ShapeError("boom"); }), ShapeError);
}

TEST(Bench, json_parses_and_holds_the_samples) {
  BenchResult r;
  r.name = "a \"quoted\" name";
  r.warmup = 3;
  r.host_seconds = {0.004, 0.001, 0.002, 0.003};
  r.device_seconds.push_back({Device{DeviceType::CUDA, 1}, {0.5, 0.25}});
  kiln_test::json::Value v = kiln_test::json::parse(r.json());
  EXPECT_EQ(v["name"].string, "a \"quoted\" name");
  EXPECT_EQ(v["warmup"].number, 3);
  EXPECT_EQ(v["repeat"].number, 4);
  const auto& host = v["host"];
  ASSERT_EQ(host["seconds"].array.size(), 4u);
  EXPECT_DOUBLE_EQ(host["seconds"][0].number, 0.004);
  EXPECT_DOUBLE_EQ(host["min"].number, 0.001);
  EXPECT_DOUBLE_EQ(host["max"].number, 0.004);
  EXPECT_DOUBLE_EQ(host["median"].number, 0.0025);
  EXPECT_DOUBLE_EQ(host["mean"].number, 0.0025);
  EXPECT_NEAR(host["stddev"].number, std::sqrt(1.25e-6), 1e-11);  // 9 significant digits
  ASSERT_EQ(v["devices"].array.size(), 1u);
  EXPECT_EQ(v["devices"][0]["device"].string, "cuda:1");
  EXPECT_DOUBLE_EQ(v["devices"][0]["median"].number, 0.375);
  EXPECT_DOUBLE_EQ(r.seconds(), 0.375);  // the first timed GPU's median
  EXPECT_DOUBLE_EQ(r.device(Device{DeviceType::CUDA, 1}).max, 0.5);
}

TEST(Bench, str_is_one_line_with_name_and_the_median_in_microseconds) {
  BenchResult r;
  r.name = "matmul";
  r.host_seconds = {1e-3, 2e-3, 6e-3};  // median 2 ms, mean 3 ms, population std sqrt(14/3) ms
  r.device_seconds.push_back({Device{DeviceType::CUDA, 0}, {4e-3, 2e-3, 2.5e-3}});  // median 2.5 ms, mean 2.83
  const std::string s = r.str();
  EXPECT_EQ(s.find('\n'), std::string::npos);
  EXPECT_EQ(s.rfind("matmul", 0), 0u) << s;
  EXPECT_NE(s.find("host: median    2000.000 us (min 1000.000, max 6000.000, std 2160.247 us)"), std::string::npos)
      << s;
  EXPECT_EQ(s.find("3000.000"), std::string::npos) << "the mean is not the figure: " << s;
  EXPECT_NE(s.find("cuda:0: median    2500.000 us (min 2000.000, max 4000.000"), std::string::npos) << s;
}

TEST(Timer, cpu_timer_uses_the_host_clock_and_keeps_every_interval) {
  Timer t(cpu());
  for (int i = 0; i < 3; ++i) {
    t.start();
    sleep_ms(4);
    t.stop();
  }
  EXPECT_EQ(t.count(), 3u);
  std::vector<double> ms = t.times_ms();
  ASSERT_EQ(ms.size(), 3u);
  double sum = 0;
  for (double m : ms) {
    EXPECT_GE(m, 4.0);
    EXPECT_LT(m, 1000.0);
    sum += m;
  }
  EXPECT_DOUBLE_EQ(t.elapsed_ms(), sum);
  t.reset();
  EXPECT_EQ(t.count(), 0u);
  EXPECT_EQ(t.elapsed_ms(), 0.0);
}

TEST(Timer, start_twice_or_stop_first_throws) {
  Timer t(cpu());
  expect_error<ValueError>([&] { t.stop(); }, {"Timer::stop", "not running"});
  t.start();
  EXPECT_TRUE(t.running());
  expect_error<ValueError>([&] { t.start(); }, {"Timer::start", "already running"});
  t.stop();
  EXPECT_FALSE(t.running());
}

TEST(Timer, scoped_timer_times_its_scope_also_when_it_throws) {
  Timer t(cpu());
  {
    ScopedTimer s(t);
    sleep_ms(3);
  }
  EXPECT_EQ(t.count(), 1u);
  EXPECT_GE(t.times_ms()[0], 3.0);
  try {
    ScopedTimer s(t);
    throw ValueError("leaving");
  } catch (const ValueError&) {
  }
  EXPECT_EQ(t.count(), 2u);
  EXPECT_FALSE(t.running());
}

TEST(Timer, missing_gpu_throws_device_error) {
  if (num_gpus() > 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_THROW(Timer(Device{DeviceType::CUDA, 0}), DeviceError);
}

TEST(SyncDebug, cpu_work_makes_no_syncs_and_no_copies) {
  reset_sync_counters();
  Array a = arange(0, 12, 1, float32, cpu()).reshape({3, 4});
  float s = a.sum().item<float>();
  std::vector<float> v = a.to_vector<float>();
  std::ostringstream out;
  out << a;
  Array b = a.to(cpu());
  Array c = zeros({3, 4});
  c.copy_from(a);
  synchronize(cpu());
  EXPECT_EQ(s, 66.0f);
  EXPECT_EQ(v.size(), 12u);
  EXPECT_EQ(sync_counters(), SyncCounters{});
}

TEST(SyncDebug, guard_sets_and_restores_the_mode) {
  const SyncDebugMode outer = sync_debug_mode();
  {
    SyncDebugGuard g(SyncDebugMode::error);
    EXPECT_EQ(sync_debug_mode(), SyncDebugMode::error);
    {
      SyncDebugGuard w(SyncDebugMode::warn);
      EXPECT_EQ(sync_debug_mode(), SyncDebugMode::warn);
    }
    EXPECT_EQ(sync_debug_mode(), SyncDebugMode::error);
  }
  EXPECT_EQ(sync_debug_mode(), outer);
}

TEST(SyncDebug, parse_and_name_modes) {
  EXPECT_EQ(parse_sync_debug_mode("warn"), SyncDebugMode::warn);
  EXPECT_EQ(parse_sync_debug_mode("error"), SyncDebugMode::error);
  EXPECT_EQ(parse_sync_debug_mode("off"), SyncDebugMode::off);
  EXPECT_STREQ(sync_debug_mode_name(SyncDebugMode::warn), "warn");
  expect_error<ValueError>([] { (void)parse_sync_debug_mode("loud"); }, {"'loud'", "off, warn, error"});
}

// The hooks the CUDA backend calls, driven directly: counting, warn lines and error mode.
TEST(SyncDebug, hooks_count_copies_bytes_and_syncs) {
  using detail::CopyDirection;
  const Device g{DeviceType::CUDA, 0};
  SyncDebugGuard guard(SyncDebugMode::off);
  detail::note_copy(CopyDirection::HostToDevice, 1000, g, true);
  detail::note_copy(CopyDirection::HostToDevice, 24, g, false);
  detail::note_copy(CopyDirection::DeviceToHost, 4, g, true);
  detail::note_copy(CopyDirection::DeviceToDevice, 64, g, false);
  detail::note_explicit_sync();
  SyncCounters c = guard.counters();
  EXPECT_EQ(c.syncs, 2u);
  EXPECT_EQ(c.h2d_copies, 2u);
  EXPECT_EQ(c.h2d_bytes, 1024u);
  EXPECT_EQ(c.d2h_copies, 1u);
  EXPECT_EQ(c.d2h_bytes, 4u);
  EXPECT_EQ(c.d2d_copies, 1u);
  EXPECT_EQ(c.d2d_bytes, 64u);
  EXPECT_EQ(c.explicit_syncs, 1u);
  EXPECT_EQ(c.str(), "2 syncs, 2 H2D copies (1.02 kB), 1 D2H copy (4 bytes), 1 D2D copy (64 bytes), 1 explicit sync");
  reset_sync_counters();
  EXPECT_EQ(sync_counters(), SyncCounters{});
}

TEST(SyncDebug, warn_prints_one_line_naming_the_op) {
  const Device g{DeviceType::CUDA, 0};
  SyncDebugGuard guard(SyncDebugMode::warn);
  testing::internal::CaptureStderr();
  {
    detail::SyncOpScope outer("item()");
    detail::SyncOpScope inner("to()");  // the outermost op is the one the user wrote
    detail::note_copy(detail::CopyDirection::DeviceToHost, 4, g, true);
  }
  detail::note_copy(detail::CopyDirection::HostToDevice, 2048, g, false);
  detail::note_copy(detail::CopyDirection::DeviceToDevice, 8, g, false);  // not host<->device: silent
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err,
            "kiln: implicit synchronisation in item() on cuda:0 (4 bytes D2H)\n"
            "kiln: asynchronous host<->device copy in to() on cuda:0 (2.05 kB H2D)\n");
}

TEST(SyncDebug, error_mode_throws_for_implicit_syncs_only) {
  const Device g{DeviceType::CUDA, 1};
  SyncDebugGuard guard(SyncDebugMode::error);
  expect_error<Error>(
      [&] {
        detail::SyncOpScope op("printing");
        detail::note_copy(detail::CopyDirection::DeviceToHost, 400, g, true);
      },
      {"implicit synchronisation in printing", "cuda:1", "400 bytes D2H", "error mode"});
  EXPECT_EQ(guard.counters().d2h_copies, 0u) << "nothing is counted or copied when it throws";
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(detail::note_copy(detail::CopyDirection::HostToDevice, 400, g, false));  // asynchronous: reported
  EXPECT_NE(testing::internal::GetCapturedStderr().find("asynchronous"), std::string::npos);
}

}  // namespace
