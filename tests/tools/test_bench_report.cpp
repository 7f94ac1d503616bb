// bench/bench_common.hpp (the harness of bench_cpu, bench_gpu, bench_launch, bench_fusion_variants): its
// statistics are kiln::summarize's, per call; Report's file parses as JSON even when a figure is NaN or infinite.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "../../bench/bench_common.hpp"
#include "json_mini.hpp"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_path(const char* name) {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/" + name + "_" + std::to_string(::getpid()) + ".json";
}

}  // namespace

TEST(BenchReport, TimingIsKilnSummarizePerCall) {
  // Samples of 2 calls each: 1, 2, 3, 4 s -> per call median 1.25, mean 1.25, population stddev sqrt(1.25) / 2.
  const kiln::benchutil::Timing t = kiln::benchutil::per_call(kiln::summarize({4.0, 1.0, 3.0, 2.0}), 2);
  EXPECT_DOUBLE_EQ(t.min, 0.5);
  EXPECT_DOUBLE_EQ(t.max, 2.0);
  EXPECT_DOUBLE_EQ(t.median, 1.25);
  EXPECT_DOUBLE_EQ(t.mean, 1.25);
  EXPECT_DOUBLE_EQ(t.stddev, std::sqrt(1.25) / 2);  // n, not n - 1: the "stddev" of kiln::bench's JSON
  EXPECT_EQ(t.count, 4);
  EXPECT_EQ(t.inner, 2);
  int calls = 0;
  const kiln::benchutil::Timing h =
      kiln::benchutil::time_host([&] { ++calls; }, {.warmup = 1, .repeat = 3, .min_sample_s = 1e-4});
  EXPECT_EQ(h.count, 3);
  EXPECT_GE(h.inner, 1);
  EXPECT_GT(calls, 3 * h.inner);  // warm-up, the calibration runs, then 3 samples of `inner` calls
  EXPECT_LE(h.min, h.median);
}

TEST(BenchReport, FormatSeconds) {
  EXPECT_EQ(kiln::benchutil::format_seconds(1.5e-3), "1.5 ms");
  EXPECT_EQ(kiln::benchutil::format_seconds(2.0), "2 s");
  EXPECT_EQ(kiln::benchutil::format_seconds(12.3e-6), "12.3 us");
  EXPECT_EQ(kiln::benchutil::format_seconds(0.0), "-");
}

TEST(BenchReport, NonFiniteNumbersAreWrittenAsNull) {
  using kiln::benchutil::Report;
  using kiln::benchutil::Result;
  Report report("gpu", "kiln", "test device");
  Result r;
  r.name = "copy";
  r.size = "2^20";
  r.dtype = "float32";
  r.stats.median = 0.5;
  r.stats.min = std::numeric_limits<double>::quiet_NaN();
  r.stats.mean = std::numeric_limits<double>::infinity();
  r.throughput = -std::numeric_limits<double>::infinity();
  r.unit = "GB/s";
  r.check = "ok";
  report.add(r);
  const std::string path = temp_path("kiln_bench_report");
  report.write_json(path);
  const std::string text = read_file(path);
  std::remove(path.c_str());
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  EXPECT_EQ(text.find("inf"), std::string::npos) << text;
  const auto doc = kiln_test::json::parse(text);
  const auto& row = doc["results"][0];
  EXPECT_EQ(row["median_s"].number, 0.5);
  EXPECT_EQ(row["min_s"].kind, kiln_test::json::Value::Kind::Null);
  EXPECT_EQ(row["mean_s"].kind, kiln_test::json::Value::Kind::Null);
  EXPECT_EQ(row["throughput"].kind, kiln_test::json::Value::Kind::Null);
  EXPECT_EQ(row["unit"].string, "GB/s");
  EXPECT_EQ(row["repeats"].number, 0);
  EXPECT_EQ(row["inner"].number, 1);
}
