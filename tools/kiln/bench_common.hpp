// `kiln bench`: shared pieces of the workloads — the run context, the records
// written with --json (format: docs/bench-schema.md; the PyTorch/CuPy peers
// write the same; bench/bench_report.hpp writes them and prints the tables), and the workload list. Every GPU time is
// taken with kiln::bench (events, or host time that ends after a synchronisation);
// the only bare host clock around a launch is the deliberately wrong case of the
// `timing` workload, labelled as such.
#pragma once

#include <fmt/core.h>

#include <map>
#include <string>
#include <vector>

#include "../../bench/bench_report.hpp"  // the table, JSON writing and clock shared with the bench/ programs
#include "kiln/kiln.hpp"

namespace kiln_cli {

/// One measured figure; (workload, case, metric) is the key scripts/compare joins on.
struct Record {
  std::string workload, case_name, metric, unit;
  double value = 0;
  bool higher_is_better = false;
  /// The workload's check of the result it timed: "ok", what went wrong, or empty where nothing is checked
  /// (written as the record's "check" field when not empty; scripts/compare flags a failed one "(!)").
  std::string check;
};

/// What a workload needs: where to run, how long to take, where to put results.
struct BenchContext {
  kiln::Device device = kiln::cpu();  ///< the device under test (cpu, or cuda:N)
  bool quick = false;                 ///< smaller sizes and fewer repeats
  /// --profile FILE: the workloads that support it (gpt2) profile one step (kiln::profiler), print the time per
  /// kernel class and per kernel, and write the step's Chrome trace to FILE.
  std::string profile;
  /// --recompute MODE: gpt2's GPT2Config::recompute ("none", "gelu", "block"); its cases are named with the mode.
  std::string recompute = "none";
  std::vector<Record> records;
  std::vector<std::pair<std::string, std::string>> skipped;  ///< (workload or case, reason)
  std::map<int64_t, double> copy_gbps_cache;                 ///< device copy bandwidth by element count

  bool gpu() const { return device.is_cuda(); }
  /// Why the GPU side does not run: "no GPU on this machine" or "--device cpu chose the CPU".
  std::string no_gpu_reason() const;
  void record(const std::string& workload, const std::string& case_name, const std::string& metric,
              const std::string& unit, double value, bool higher_is_better, const std::string& check = "");
  /// Prints "  skipped: <what>: <reason>" and remembers it for the JSON file.
  void skip(const std::string& what, const std::string& reason);
  /// kiln::bench options scaled for --quick: `repeat` timed calls (a third in quick mode, at least 2),
  /// `warmup` untimed ones, at most `max_seconds` (half in quick mode), timing the device under test.
  kiln::BenchOptions options(int warmup, int repeat, double max_seconds) const;
  /// The seconds to report for a result: the device's event median on a GPU, the host median on the CPU.
  double seconds(const kiln::BenchResult& r) const;
  /// Device-to-device copy bandwidth (GB/s, read + write) of `n` float32 on the device under test (cached).
  double copy_gbps(int64_t n);
};

using kiln::benchutil::format_number;   ///< "12.3" style with `digits` after the point
using kiln::benchutil::format_seconds;  ///< "1.23 ms" style, three significant digits; "-" when not positive
using kiln::benchutil::now_s;
using kiln::benchutil::Table;  ///< the bench/ programs' table: columns sized to their contents
/// Prints the workload's one-line verdict.
void verdict(const std::string& text);
/// Prints a workload's title line.
void title(const std::string& name, const std::string& what);

/// Writes the run as JSON (tool, version, device, date, host_threads, quick, records, skipped) to `path`.
void write_json(const BenchContext& ctx, const std::string& path);

/// The workloads, in the order `kiln bench` runs them.
struct Workload {
  const char* name;
  const char* what;
  void (*run)(BenchContext&);
};
const std::vector<Workload>& workloads();

void run_matmul(BenchContext& ctx);
void run_timing(BenchContext& ctx);
void run_transfer(BenchContext& ctx);
void run_overlap(BenchContext& ctx);
void run_logging(BenchContext& ctx);
void run_elementwise(BenchContext& ctx);
void run_reduction(BenchContext& ctx);
void run_overhead(BenchContext& ctx);
void run_fusion(BenchContext& ctx);
void run_alloc(BenchContext& ctx);
void run_multigpu(BenchContext& ctx);
void run_train(BenchContext& ctx);
void run_resnet50(BenchContext& ctx);
void run_attention(BenchContext& ctx);
void run_lstm(BenchContext& ctx);
void run_generate(BenchContext& ctx);
void run_gpt2(BenchContext& ctx);
/// `kiln bench gpt2 --nproc N`: the GPT-2 step data parallel with 1 rank, then N (each started by `kiln launch`
/// running `kiln bench gpt2 --rank-record FILE`), with the scaling between them; returns the exit status.
int bench_gpt2_nproc(int nproc, const std::string& device, bool quick, const std::string& json);
/// One rank of those runs: joins the process group, times the step; rank 0 writes its figures to record_file.
int gpt2_rank(const std::string& record_file, const std::string& device, bool quick);

/// Host threads the CPU side uses (OpenMP's team size: all cores unless OMP_NUM_THREADS says otherwise).
int host_threads();
/// The CPU products' libraries this build linked: "OpenBLAS", or "OpenBLAS + oneMKL" (KILN_MKL).
std::string cpu_blas();

}  // namespace kiln_cli
