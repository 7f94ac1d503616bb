// A small, device-neutral benchmark harness shared by the bench/ programs: a
// host-clock timer for synchronous (CPU) work with kiln::summarize's statistics,
// and the results table and JSON (printed and written through bench_report.hpp,
// as `kiln bench` does). A GPU benchmark times with kiln::bench (events) and
// reuses Timing, Report and the output.
//
// Timing protocol (time_host): `warmup` untimed calls first; then the number of
// calls per sample ("inner") is doubled until one sample lasts at least
// `min_sample_s`, so microsecond-scale ops are not lost in clock noise; then
// `repeat` samples, each reported as seconds per call. steady_clock is
// monotonic, and CPU ops are synchronous, so a host clock measures them right.
#pragma once

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_clock.hpp"
#include "bench_report.hpp"
#include "kiln/bench.hpp"
#include "kiln/json.hpp"

namespace kiln::benchutil {

/// How to time one workload.
struct TimingOptions {
  int warmup = 2;              ///< untimed calls before measuring
  int repeat = 10;             ///< timed samples
  double min_sample_s = 2e-3;  ///< a sample repeats the call until it lasts this long
  int max_inner = 1 << 16;     ///< cap on calls per sample
};

/// Statistics of one workload's samples in seconds per call: kiln::summarize's (count = samples; stddev is the
/// population one, as in kiln::bench's JSON), and the calls each sample made.
struct Timing : kiln::Stats {
  int inner = 1;  ///< calls per sample
};

/// `s`, the statistics of samples of `calls` calls each, per call.
inline Timing per_call(kiln::Stats s, int calls) {
  const double c = static_cast<double>(calls);
  s.min /= c;
  s.median /= c;
  s.mean /= c;
  s.max /= c;
  s.stddev /= c;
  return Timing{s, calls};
}


/// Times a synchronous callable with the host's steady clock (see the protocol above).
template <class F>
Timing time_host(F&& fn, const TimingOptions& options = {}) {
  auto run = [&](int calls) {
    const double t0 = now_s();
    for (int i = 0; i < calls; ++i) fn();
    return now_s() - t0;
  };
  for (int i = 0; i < options.warmup; ++i) fn();
  int inner = 1;
  while (inner < options.max_inner && run(inner) < options.min_sample_s) inner *= 2;
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(options.repeat));
  for (int r = 0; r < options.repeat; ++r) samples.push_back(run(inner));
  return per_call(kiln::summarize(std::move(samples)), inner);
}

/// One measured workload: what ran, how long it took and its throughput.
struct Result {
  std::string name;   ///< workload, e.g. "add" or "sum_axis0"
  std::string size;   ///< size label, the same on every side of a comparison: "2^20", "4096x4096", "1024"
  std::string dtype;  ///< "float32"
  Timing stats;
  double throughput = 0;  ///< in `unit`, computed from the median
  std::string unit;       ///< "GB/s", "GFLOP/s", "ns/elem" (lower is better only for ns/elem)
  std::string check;      ///< "ok", or what a correctness check found
};

/// A set of results plus the context they were measured in; prints a table and writes JSON.
class Report {
 public:
  Report(std::string suite, std::string library, std::string device)
      : suite_(std::move(suite)), library_(std::move(library)), device_(std::move(device)) {}

  /// Adds a key/value describing the run (threads, BLAS kernel, ...); `raw_json` for numbers.
  void set_info(const std::string& key, const std::string& value, bool raw_json = false) {
    info_.push_back({key, raw_json ? value : quote(value)});
  }
  void add(Result r) { results_.push_back(std::move(r)); }
  const std::vector<Result>& results() const { return results_; }

  /// Prints the table's header; print_row() then prints each result as it arrives (bench_report.hpp's Table).
  static void print_header() { table().print_header(); }
  static void print_row(const Result& r) {
    const double rel = r.stats.median > 0 ? 100.0 * r.stats.stddev / r.stats.median : 0.0;
    table().print_row({r.name, r.size, r.dtype, format_seconds(r.stats.median), format_seconds(r.stats.min),
                       format_number(rel, 1), format_number(r.throughput, 3), r.unit, r.check});
  }

  /// Writes {"suite", "library", "device", <info>..., "results": [...]} (docs/bench-schema.md, section 2) to
  /// `path`; throws on I/O failure.
  void write_json(const std::string& path) const {
    JsonObject out;
    out.str("suite", suite_).str("library", library_).str("device", device_);
    for (const auto& [key, value] : info_) out.raw(key, value);
    std::vector<std::string> results;
    for (const Result& r : results_)
      results.push_back(fmt::format(
          "{{\"name\": {}, \"size\": {}, \"dtype\": {}, \"median_s\": {}, \"min_s\": {}, \"mean_s\": {}, "
          "\"stddev_s\": {}, \"repeats\": {}, \"inner\": {}, \"throughput\": {}, \"unit\": {}, \"check\": {}}}",
          quote(r.name), quote(r.size), quote(r.dtype), number(r.stats.median), number(r.stats.min),
          number(r.stats.mean), number(r.stats.stddev), r.stats.count, r.stats.inner, number(r.throughput),
          quote(r.unit), quote(r.check)));
    out.array("results", results);
    const std::string error = write_file(path, out.text());
    if (!error.empty()) throw std::runtime_error("write_json: " + error);
  }

  /// A JSON string literal.
  static std::string quote(const std::string& v) { return kiln::json_quote(v); }
  /// A JSON number (null for NaN or infinity, which JSON cannot write).
  static std::string number(double v) { return kiln::json_number(v); }

 private:
  static const Table& table() {
    static const Table t({"workload", "size", "dtype", "median", "min", "+-%", "throughput", "unit", "check"},
                         {12, 10, 8, 11, 11, 7, 12, 8, 0});
    return t;
  }
  std::string suite_, library_, device_;
  std::vector<std::pair<std::string, std::string>> info_;
  std::vector<Result> results_;
};

}  // namespace kiln::benchutil
