// kiln::profiler on the host: ranges (nesting, threads, sessions), the Chrome trace (valid JSON, names,
// durations at least what was slept), the summary of an empty and a hand-built profile (busy time, bytes,
// classes computed by hand), the default classifier on real kernel names, and the session's errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/error.hpp"
#include "kiln/profiler.hpp"
#include "test_util.hpp"

namespace {

namespace prof = kiln::profiler;
using kiln_test::expect_error;
using namespace std::chrono_literals;

// Ends a session a failed test left open, so the next test can start one.
struct StopAtExit {
  ~StopAtExit() {
    if (prof::active()) (void)prof::stop();
  }
};

const prof::RangeRecord& find_range(const prof::Profile& p, const std::string& name) {
  for (const prof::RangeRecord& r : p.ranges)
    if (r.name == name) return r;
  throw std::runtime_error("no range " + name);
}

TEST(Profiler, ranges_nest_and_last_at_least_what_they_slept) {
  StopAtExit guard;
  prof::start();
  EXPECT_TRUE(prof::active());
  {
    prof::Range outer("outer");
    std::this_thread::sleep_for(2ms);
    {
      prof::Range inner("inner");
      std::this_thread::sleep_for(3ms);
    }
  }
  const prof::Profile p = prof::stop();
  EXPECT_FALSE(prof::active());
  ASSERT_EQ(p.ranges.size(), 2u);
  const prof::RangeRecord outer = find_range(p, "outer");
  const prof::RangeRecord inner = find_range(p, "inner");
  EXPECT_EQ(outer.depth, 0);
  EXPECT_EQ(inner.depth, 1);
  EXPECT_EQ(outer.thread, inner.thread);
  EXPECT_LE(outer.start_ns, inner.start_ns);
  EXPECT_GE(outer.end_ns, inner.end_ns);
  EXPECT_GE(inner.duration_ns(), 3'000'000);
  EXPECT_GE(outer.duration_ns(), 5'000'000);
  EXPECT_LE(p.start_ns, outer.start_ns);
  EXPECT_GE(p.stop_ns, outer.end_ns);
  EXPECT_GE(p.wall_ns(), 5'000'000);
}

TEST(Profiler, ranges_outside_a_session_are_not_recorded) {
  StopAtExit guard;
  { prof::Range before("before any session"); }
  std::optional<prof::Range> straddling;
  straddling.emplace("opened before start");
  prof::start();
  straddling.reset();  // opened while no profiler was active: not recorded
  { prof::Range kept("kept"); }
  std::optional<prof::Range> open_at_stop;
  open_at_stop.emplace("open at stop");
  const prof::Profile p = prof::stop();
  open_at_stop.reset();  // closes after its session ended: not recorded, and no crash
  ASSERT_EQ(p.ranges.size(), 1u);
  EXPECT_EQ(p.ranges[0].name, "kept");
  EXPECT_EQ(p.ranges[0].depth, 0);
}

TEST(Profiler, ranges_from_several_threads_are_all_recorded) {
  StopAtExit guard;
  constexpr int kThreads = 4, kRanges = 50;
  prof::start();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < kRanges; ++i) {
        prof::Range batch("batch " + std::to_string(t));
        prof::Range load("load");
      }
    });
  for (std::thread& t : threads) t.join();
  const prof::Profile p = prof::stop();
  ASSERT_EQ(p.ranges.size(), static_cast<size_t>(2 * kThreads * kRanges));
  std::set<uint32_t> thread_ids;
  int loads = 0;
  for (const prof::RangeRecord& r : p.ranges) {
    thread_ids.insert(r.thread);
    if (r.name == "load") {
      ++loads;
      EXPECT_EQ(r.depth, 1);
    } else {
      EXPECT_EQ(r.depth, 0);
    }
  }
  EXPECT_EQ(loads, kThreads * kRanges);
  EXPECT_EQ(thread_ids.size(), static_cast<size_t>(kThreads));
  for (size_t i = 1; i < p.ranges.size(); ++i) EXPECT_LE(p.ranges[i - 1].start_ns, p.ranges[i].start_ns);
}

TEST(Profiler, chrome_trace_is_json_with_the_ranges_and_their_durations) {
  StopAtExit guard;
  prof::start();
  {
    prof::Range step("step \"1\"");  // a quote must come out escaped
    std::this_thread::sleep_for(4ms);
    prof::Range forward("forward");
    std::this_thread::sleep_for(2ms);
  }
  const prof::Profile p = prof::stop();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_profiler_trace_" + std::to_string(::getpid()) + ".json"))
          .string();
  p.save_chrome_trace(path);
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);  // throws on invalid JSON
  std::remove(path.c_str());
  ASSERT_TRUE(trace.is_array());
  double step_dur = -1, forward_dur = -1, step_ts = -1, forward_ts = -1;
  int host_pid = -1;
  for (const nlohmann::json& e : trace) {
    ASSERT_TRUE(e.contains("name") && e.contains("ph") && e.contains("pid")) << e.dump();
    if (e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"].get<std::string>().starts_with("host"))
      host_pid = e["pid"].get<int>();
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e.contains("ts") && e.contains("dur") && e.contains("tid") && e.contains("args")) << e.dump();
    if (e["name"] == "step \"1\"") step_dur = e["dur"].get<double>(), step_ts = e["ts"].get<double>();
    if (e["name"] == "forward") {
      forward_dur = e["dur"].get<double>(), forward_ts = e["ts"].get<double>();
      EXPECT_EQ(e["args"]["depth"], 1);
    }
  }
  EXPECT_GE(step_dur, 6000.0);  // microseconds
  EXPECT_GE(forward_dur, 2000.0);
  EXPECT_GE(step_ts, 0.0);
  EXPECT_GE(forward_ts, step_ts + 4000.0);
  EXPECT_GE(host_pid, 0) << "the host process is named";
}

TEST(Profiler, summary_of_an_empty_profile) {
  StopAtExit guard;
  prof::start();
  const prof::Profile p = prof::stop();
  EXPECT_TRUE(p.ranges.empty());
  EXPECT_EQ(p.gpu_busy_ns(), 0);
  EXPECT_EQ(p.memcpy_bytes(), 0);
  EXPECT_GE(p.wall_ns(), 0);
  if (p.kernels.empty()) {
    const std::string s = p.summary();
    EXPECT_NE(s.find("0 kernels"), std::string::npos) << s;
    EXPECT_NE(s.find("(no kernels)"), std::string::npos) << s;
    EXPECT_NE(s.find("GPU busy 0.000 ms"), std::string::npos) << s;
  }
  const std::string empty = prof::Profile{}.summary();
  EXPECT_NE(empty.find("wall 0.000 ms"), std::string::npos) << empty;
  EXPECT_EQ(nlohmann::json::parse(prof::Profile{}.chrome_trace()).size(), 2u) << "the two process names only";
}

TEST(Profiler, double_start_and_stop_without_start_are_errors_naming_the_fix) {
  StopAtExit guard;
  expect_error<kiln::ValueError>([] { (void)prof::stop(); },
                                 {"kiln::profiler::stop", "no profiler is active", "kiln::profiler::start()"});
  prof::start();
  expect_error<kiln::ValueError>([] { prof::start(); },
                                 {"kiln::profiler::start", "already active", "kiln::profiler::stop()"});
  EXPECT_TRUE(prof::active()) << "the failed start leaves the first session running";
  (void)prof::stop();
  expect_error<kiln::ValueError>([] { (void)prof::stop(); }, {"no profiler is active"});
  prof::start();  // usable again after the errors
  (void)prof::stop();
}

TEST(Profiler, save_chrome_trace_into_a_missing_folder_names_the_path) {
  const std::string path = "/nonexistent-kiln-folder/trace.json";
  expect_error<kiln::ValueError>([&] { prof::Profile{}.save_chrome_trace(path); }, {"save_chrome_trace", path});
}

// A profile written by hand: the busy time, bytes and table values below are computed by hand.
prof::Profile hand_profile() {
  prof::Profile p;
  p.start_ns = 1000;
  p.stop_ns = 1000 + 100'000;
  const auto kernel = [](std::string name, int64_t b, int64_t e, uint32_t stream) {
    prof::KernelRecord k;
    k.name = std::move(name);
    k.start_ns = b, k.end_ns = e, k.stream = stream;
    return k;
  };
  // Streams 7 and 8 overlap, and so do the copy and the memset: relative to the start, the GPU is busy over
  // [1000, 20000) and [30000, 50000), 19000 + 20000 ns.
  p.kernels = {
      kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas", 1000 + 1000, 1000 + 11'000, 7),
      kernel("kiln_add_f32_f32_cf32_f32_contig_v4_i32", 1000 + 5000, 1000 + 10'000, 8),
      kernel("kiln_add_f32_f32_cf32_f32_contig_v4_i32", 1000 + 10'000, 1000 + 20'000, 8)};
  p.transfers = {{"HtoD", 4096, 1000 + 30'000, 1000 + 45'000, 0, 7},
                 {"memset", 1 << 20, 1000 + 40'000, 1000 + 50'000, 0, 7}};
  return p;
}

TEST(Profiler, busy_time_counts_overlaps_once_and_bytes_skip_memsets) {
  const prof::Profile p = hand_profile();
  EXPECT_EQ(p.gpu_busy_ns(), 39'000);
  EXPECT_EQ(p.memcpy_bytes(), 4096);
  EXPECT_EQ(p.wall_ns(), 100'000);
}

TEST(Profiler, summary_groups_kernels_by_name_and_class) {
  const std::string s = hand_profile().summary();
  // kiln_add: 2 calls, 15000 ns = 0.015 ms, 60.0% of 25000 ns of kernel time, mean 7.50 us.
  EXPECT_NE(s.find("      2       0.015   60.0%        7.50  kiln_add_f32_f32_cf32_f32_contig_v4_i32"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("      1       0.010   40.0%       10.00  sm90_xmma_gemm"), std::string::npos) << s;
  EXPECT_NE(s.find("      2       0.015   60.0%        7.50  elementwise"), std::string::npos) << s;
  EXPECT_NE(s.find("      1       0.010   40.0%       10.00  gemm"), std::string::npos) << s;
  EXPECT_NE(s.find("GPU busy 0.039 ms (39.0% of wall), 3 kernels, 1 copies (4.00 KiB), 1 memsets"), std::string::npos)
      << s;
  // The longest group first.
  EXPECT_LT(s.find("kiln_add_f32"), s.find("sm90_xmma_gemm")) << s;
  // A caller's classifier replaces the default; none drops the class table.
  const std::string mine = hand_profile().summary([](std::string_view) { return std::string("everything"); });
  EXPECT_NE(mine.find("      3       0.025  100.0%        8.33  everything"), std::string::npos) << mine;
  EXPECT_EQ(hand_profile().summary(nullptr).find("by class"), std::string::npos);
  // max_rows: one row, then how many were left out.
  EXPECT_NE(hand_profile().summary(prof::default_classifier, 1).find("... 1 more"), std::string::npos);
}

TEST(Profiler, chrome_trace_puts_gpu_work_on_the_gpu_process_by_stream) {
  const nlohmann::json trace = nlohmann::json::parse(hand_profile().chrome_trace());
  int gpu_pid = -1;
  for (const nlohmann::json& e : trace)
    if (e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == "GPU") gpu_pid = e["pid"].get<int>();
  ASSERT_GE(gpu_pid, 0);
  std::set<int64_t> tids;
  std::set<std::pair<double, double>> adds;
  int kernels = 0;
  for (const nlohmann::json& e : trace) {
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["pid"].get<int>(), gpu_pid) << e.dump();
    tids.insert(e["tid"].get<int64_t>());
    if (e["cat"] == "kernel") {
      ++kernels;
      if (e["name"] == "kiln_add_f32_f32_cf32_f32_contig_v4_i32")
        adds.emplace(e["ts"].get<double>(), e["dur"].get<double>());
    }
  }
  EXPECT_EQ(kernels, 3);
  // [5000, 10000) and [10000, 20000) ns after the start, in microseconds.
  EXPECT_EQ(adds, (std::set<std::pair<double, double>>{{5.0, 5.0}, {10.0, 10.0}}));
  EXPECT_EQ(tids.size(), 2u) << "one thread per stream";
}

TEST(Profiler, default_classifier_knows_kiln_cublas_and_cudnn_kernels) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"kiln_add_f32_f32_cf32_f32_contig_v4_i32", "elementwise"},
      {"kiln_copysign_f32_f32_cf32_f32_strided2_i32", "elementwise"},
      {"kiln_where_b_f32_f32_cf32_f32_tiled2_t1_i64", "elementwise"},
      {"kiln_fused_gelu_0badf00d_contig_v4_i32", "elementwise"},
      {"kiln_sequence_f32", "elementwise"},
      {"kiln_copy_f32_f16_strided3_i32", "copy"},
      {"kiln_sum_f32_af32_f32_rows_g1_k1_r1_i32", "reduction"},
      {"kiln_max_f16_af32_partial_cols_k2_r1_v2_i64", "reduction"},
      {"kiln_fused_softmax_12345678_rows_g4_k1_r1_m1_i32", "reduction"},
      {"kiln_matmul_tiled_i32", "gemm"},
      {"kiln_random_f32", "random"},
      {"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_cublas", "gemm"},
      {"void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(Params)", "gemm"},
      {"nvjet_tst_128x64_64x8_1x2_h_bz_TNT", "gemm"},
      {"ampere_sgemm_128x64_nn", "gemm"},
      {"sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32", "convolution"},
      {"cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention"},
      {"bn_apply_nchw4", "normalization"},
      {"sort_block", "sort"},
      {"scan_segments", "reduction"},
      {"some_library_kernel", "other"},
  };
  for (const auto& [name, cls] : cases) EXPECT_EQ(prof::default_classifier(name), cls) << name;
}

}  // namespace
