// bench/bench_common.hpp's Report (the JSON of bench_cpu, bench_gpu, bench_launch, bench_fusion_variants):
// the file parses as JSON even when a figure is NaN or infinite.
#include <gtest/gtest.h>

#include <unistd.h>

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

TEST(BenchReport, NonFiniteNumbersAreWrittenAsNull) {
  using kiln::benchutil::Report;
  using kiln::benchutil::Result;
  Report report("gpu", "kiln", "test device");
  Result r;
  r.name = "copy";
  r.size = "2^20";
  r.dtype = "float32";
  r.stats.median_s = 0.5;
  r.stats.min_s = std::numeric_limits<double>::quiet_NaN();
  r.stats.mean_s = std::numeric_limits<double>::infinity();
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
}
