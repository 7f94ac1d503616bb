// bench_cpu: kiln's CPU throughput on the workloads that bench/numpy_cpu.py runs
// in NumPy (same sizes, same timing protocol, same JSON schema), so
// scripts/compare_cpu.py can put them side by side:
//   add          float32 a + b at 2^16, 2^20, 2^24        GB/s, 3 arrays moved
//   chain        tanh(x*1.5+0.3)*x - exp(-x*x)*0.5, op by op (eager, like NumPy),
//                at 2^20 and 2^24                          ns per element
//   sum          full sum at 2^20 and 2^24                 GB/s read
//   sum_axis0/1  sum over one axis of a 4096x4096 matrix   GB/s read
//   matmul       float32 n x n @ n x n, n = 256, 1024, 2048  GFLOP/s
// Every workload is checked once (outside the timing) against a float64
// reference computed here, so a fast wrong kernel cannot pass unnoticed.
//
// Usage: bench_cpu [--threads N] [--quick] [--repeat N] [--warmup N]
//                  [--filter SUBSTRING] [--json PATH]
#include <fmt/core.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "kiln/kiln.hpp"

// OpenBLAS's own controls, looked up weakly: kiln's matmul goes through BLAS,
// whose thread pool OMP_NUM_THREADS does not always govern (the pthreads build).
// They are null when the BLAS linked in is not OpenBLAS.
extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
char* openblas_get_corename(void) __attribute__((weak));
char* openblas_get_config(void) __attribute__((weak));
}

namespace {

using kiln::Array;
using kiln::benchutil::Result;
using kiln::benchutil::TimingOptions;

struct Options {
  int threads = 0;  // 0: leave OpenMP's default (OMP_NUM_THREADS or all cores)
  bool quick = false;
  int repeat = -1, warmup = -1;
  std::string filter;
  std::string json_path;
};

[[noreturn]] void usage(const char* message) {
  fmt::print(stderr,
             "bench_cpu: {}\nusage: bench_cpu [--threads N] [--quick] [--repeat N] [--warmup N] "
             "[--filter SUBSTRING] [--json PATH]\n",
             message);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    auto number = [&]() {
      std::string v = value();
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0) usage((a + " needs a non-negative integer, got '" + v + "'").c_str());
      return static_cast<int>(n);
    };
    if (a == "--threads")
      o.threads = number();
    else if (a == "--quick")
      o.quick = true;
    else if (a == "--repeat")
      o.repeat = number();
    else if (a == "--warmup")
      o.warmup = number();
    else if (a == "--filter")
      o.filter = value();
    else if (a == "--json")
      o.json_path = value();
    else if (a == "-h" || a == "--help")
      usage("help");
    else
      usage(("unknown argument '" + a + "'").c_str());
  }
  return o;
}

/// One workload: its name and size label, and a function that measures and checks it.
struct Workload {
  std::string name, size;
  std::function<Result(const TimingOptions&)> run;
};

std::string pow2_label(int64_t n) { return fmt::format("2^{}", static_cast<int>(std::log2(static_cast<double>(n)))); }

/// Indices spread over [0, n): both ends and `count` points in between.
std::vector<int64_t> sample_indices(int64_t n, int count = 64) {
  std::vector<int64_t> idx{0, n - 1};
  for (int i = 1; i <= count; ++i) idx.push_back(n * i / (count + 1));
  return idx;
}

/// "ok", or the first index whose value differs from the reference by more than the tolerance.
struct Checker {
  double rtol, atol;
  std::string verdict = "ok";
  void expect(double got, double want, const std::string& where) {
    if (verdict != "ok") return;
    if (!(std::abs(got - want) <= atol + rtol * std::abs(want)))
      verdict = fmt::format("MISMATCH at {}: {} vs reference {}", where, got, want);
  }
};

Result make_result(const std::string& name, const std::string& size, const kiln::benchutil::Timing& stats, double throughput,
                   const std::string& unit, const std::string& check) {
  return Result{name, size, "float32", stats, throughput, unit, check};
}

Result bench_add(int64_t n, const TimingOptions& t) {
  Array a = kiln::random::uniform({n}, 0.0, 1.0, kiln::float32, kiln::cpu());
  Array b = kiln::random::uniform({n}, 0.0, 1.0, kiln::float32, kiln::cpu());
  Array c = a + b;
  Checker check{0, 0};
  const float *pa = a.data<float>(), *pb = b.data<float>(), *pc = c.data<float>();
  for (int64_t i : sample_indices(n)) check.expect(pc[i], static_cast<float>(pa[i] + pb[i]), fmt::format("[{}]", i));
  auto stats = kiln::benchutil::time_host([&] { Array r = a + b; }, t);
  double bytes = 3.0 * static_cast<double>(n) * 4.0;
  return make_result("add", pow2_label(n), stats, bytes / stats.median / 1e9, "GB/s", check.verdict);
}

Array chain(const Array& x) { return kiln::tanh(x * 1.5f + 0.3f) * x - kiln::exp(-x * x) * 0.5f; }

Result bench_chain(int64_t n, const TimingOptions& t) {
  Array x = kiln::random::uniform({n}, -1.0, 1.0, kiln::float32, kiln::cpu());
  Array y = chain(x);
  Checker check{1e-5, 1e-6};
  const float *px = x.data<float>(), *py = y.data<float>();
  for (int64_t i : sample_indices(n, 1000)) {
    double v = px[i];
    check.expect(py[i], std::tanh(v * 1.5 + 0.3) * v - std::exp(-v * v) * 0.5, fmt::format("[{}]", i));
  }
  auto stats = kiln::benchutil::time_host([&] { Array r = chain(x); }, t);
  return make_result("chain", pow2_label(n), stats, stats.median / static_cast<double>(n) * 1e9, "ns/elem",
                     check.verdict);
}

Result bench_sum(int64_t n, const TimingOptions& t) {
  Array x = kiln::random::uniform({n}, 0.0, 1.0, kiln::float32, kiln::cpu());
  const float* px = x.data<float>();
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += px[i];
  Checker check{1e-5, 0};
  check.expect(kiln::sum(x).item<double>(), want, "sum");
  auto stats = kiln::benchutil::time_host([&] { Array r = kiln::sum(x); }, t);
  double bytes = static_cast<double>(n) * 4.0;
  return make_result("sum", pow2_label(n), stats, bytes / stats.median / 1e9, "GB/s", check.verdict);
}

Result bench_sum_axis(int64_t rows, int64_t cols, int64_t axis, const TimingOptions& t) {
  Array m = kiln::random::uniform({rows, cols}, 0.0, 1.0, kiln::float32, kiln::cpu());
  Array r = kiln::sum(m, axis);
  Checker check{1e-5, 0};
  const float *pm = m.data<float>(), *pr = r.data<float>();
  int64_t outer = axis == 0 ? cols : rows, inner = axis == 0 ? rows : cols;
  for (int64_t o : sample_indices(outer, 16)) {
    double want = 0;
    for (int64_t i = 0; i < inner; ++i) want += axis == 0 ? pm[i * cols + o] : pm[o * cols + i];
    check.expect(pr[o], want, fmt::format("[{}]", o));
  }
  auto stats = kiln::benchutil::time_host([&] { Array s = kiln::sum(m, axis); }, t);
  double bytes = static_cast<double>(rows * cols) * 4.0;
  return make_result(fmt::format("sum_axis{}", axis), fmt::format("{}x{}", rows, cols), stats,
                     bytes / stats.median / 1e9, "GB/s", check.verdict);
}

Result bench_matmul(int64_t n, const TimingOptions& t) {
  Array a = kiln::random::uniform({n, n}, -1.0, 1.0, kiln::float32, kiln::cpu());
  Array b = kiln::random::uniform({n, n}, -1.0, 1.0, kiln::float32, kiln::cpu());
  Array c = kiln::matmul(a, b);
  // Entries are sums of n products of [-1, 1) values: about sqrt(n)/3 in size, with float32 rounding
  // error growing like n * eps in the worst case; compare against that scale.
  Checker check{0, 4e-6 * static_cast<double>(n)};
  const float *pa = a.data<float>(), *pb = b.data<float>(), *pc = c.data<float>();
  for (int64_t e : sample_indices(n * n, 32)) {
    int64_t i = e / n, j = e % n;
    double want = 0;
    for (int64_t k = 0; k < n; ++k) want += static_cast<double>(pa[i * n + k]) * pb[k * n + j];
    check.expect(pc[e], want, fmt::format("[{}, {}]", i, j));
  }
  auto stats = kiln::benchutil::time_host([&] { Array r = kiln::matmul(a, b); }, t);
  double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  return make_result("matmul", std::to_string(n), stats, flops / stats.median / 1e9, "GFLOP/s", check.verdict);
}

std::vector<Workload> workloads() {
  std::vector<Workload> w;
  for (int64_t n : {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 24})
    w.push_back({"add", pow2_label(n), [n](const TimingOptions& t) { return bench_add(n, t); }});
  for (int64_t n : {int64_t{1} << 20, int64_t{1} << 24})
    w.push_back({"chain", pow2_label(n), [n](const TimingOptions& t) { return bench_chain(n, t); }});
  for (int64_t n : {int64_t{1} << 20, int64_t{1} << 24})
    w.push_back({"sum", pow2_label(n), [n](const TimingOptions& t) { return bench_sum(n, t); }});
  for (int64_t axis : {0, 1})
    w.push_back({fmt::format("sum_axis{}", axis), "4096x4096",
                 [axis](const TimingOptions& t) { return bench_sum_axis(4096, 4096, axis, t); }});
  for (int64_t n : {256, 1024, 2048})
    w.push_back({"matmul", std::to_string(n), [n](const TimingOptions& t) { return bench_matmul(n, t); }});
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  Options options = parse(argc, argv);
  if (options.threads > 0) {
    omp_set_num_threads(options.threads);
    if (openblas_set_num_threads) openblas_set_num_threads(options.threads);
  }
  TimingOptions timing;
  if (options.quick) timing = TimingOptions{.warmup = 1, .repeat = 5, .min_sample_s = 1e-3};
  if (options.repeat > 0) timing.repeat = options.repeat;
  if (options.warmup >= 0) timing.warmup = options.warmup;

  int threads = omp_get_max_threads();
  int blas_threads = openblas_get_num_threads ? openblas_get_num_threads() : -1;
  std::string corename = openblas_get_corename ? openblas_get_corename() : "unknown";
  std::string blas_config = openblas_get_config ? openblas_get_config() : "unknown (not OpenBLAS?)";
  const char* coretype_env = std::getenv("OPENBLAS_CORETYPE");

  kiln::benchutil::Report report("cpu", "kiln", "cpu");
  report.set_info("version", kiln::kVersion);
  report.set_info("build", kiln::build_info());
  report.set_info("threads", std::to_string(threads), true);
  report.set_info("blas_threads", std::to_string(blas_threads), true);
  report.set_info("blas", blas_config);
  report.set_info("blas_kernel", corename);
  report.set_info("openblas_coretype_env", coretype_env ? coretype_env : "");
  report.set_info("warmup", std::to_string(timing.warmup), true);
  report.set_info("repeat", std::to_string(timing.repeat), true);

  fmt::print("== kiln CPU benchmarks: {} | threads {} (OpenMP), BLAS threads {} | BLAS {} kernel {}\n",
             kiln::build_info(), threads, blas_threads, blas_config, corename);
  fmt::print("   {} warm-up call(s), median of {} samples; each sample >= {} ms of calls\n\n", timing.warmup,
             timing.repeat, timing.min_sample_s * 1e3);
  kiln::benchutil::Report::print_header();

  kiln::random::seed(0);
  std::vector<std::string> errors;
  for (const Workload& w : workloads()) {
    if (!options.filter.empty() && (w.name + " " + w.size).find(options.filter) == std::string::npos) continue;
    try {
      Result r = w.run(timing);
      kiln::benchutil::Report::print_row(r);
      report.add(std::move(r));
    } catch (const std::exception& e) {
      std::string message = fmt::format("{} {}: {}", w.name, w.size, e.what());
      fmt::print("{:<12} {:>10} failed: {}\n", w.name, w.size, e.what());
      errors.push_back(message);
    }
  }
  std::string errors_json = "[";
  for (size_t i = 0; i < errors.size(); ++i) errors_json += (i ? ", " : "") + kiln::benchutil::Report::quote(errors[i]);
  report.set_info("errors", errors_json + "]", true);

  if (!options.json_path.empty()) {
    report.write_json(options.json_path);
    fmt::print("\nwrote {}\n", options.json_path);
  }
  bool mismatch = false;
  for (const Result& r : report.results()) mismatch |= r.check != "ok";
  return errors.empty() && !mismatch ? 0 : 1;
}
