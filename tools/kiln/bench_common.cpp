// `kiln bench` shared pieces (see bench_common.hpp).
#include "bench_common.hpp"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "kiln/json.hpp"

namespace kiln_cli {

using namespace kiln;

void BenchContext::record(const std::string& workload, const std::string& case_name, const std::string& metric,
                          const std::string& unit, double value, bool higher_is_better, const std::string& check) {
  records.push_back({workload, case_name, metric, unit, value, higher_is_better, check});
}

void BenchContext::skip(const std::string& what, const std::string& reason) {
  fmt::print("  skipped: {}: {}\n", what, reason);
  skipped.emplace_back(what, reason);
}

std::string BenchContext::no_gpu_reason() const {
  if (num_gpus() == 0) return built_with_cuda() ? "no GPU on this machine" : "no GPU (CPU-only build)";
  return "--device " + device.str() + " chose the CPU";
}

BenchOptions BenchContext::options(int warmup, int repeat, double max_seconds) const {
  BenchOptions o;
  o.warmup = warmup;
  o.repeat = quick ? std::max(2, repeat / 3) : repeat;
  o.max_seconds = quick ? max_seconds / 2 : max_seconds;
  o.devices = {device};  // {cpu()}: host time only, never the GPUs found by bench's default rule
  return o;
}

double BenchContext::seconds(const BenchResult& r) const { return gpu() ? r.device(device).median : r.host().median; }

double BenchContext::copy_gbps(int64_t n) {
  auto it = copy_gbps_cache.find(n);
  if (it != copy_gbps_cache.end()) return it->second;
  Array a = random::uniform({n}, float32, device), b = empty({n}, float32, device);
  BenchResult r = bench(
      "copy", [&] { b.assign(a); }, options(2, 15, 5));
  double gbps = 2.0 * 4.0 * static_cast<double>(n) / seconds(r) / 1e9;
  copy_gbps_cache[n] = gbps;
  return gbps;
}

void Table::print() const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& r : rows_)
    for (size_t c = 0; c < r.size() && c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = " ";
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      bool numeric = !cell.empty() && (std::isdigit(static_cast<unsigned char>(cell[0])) || cell[0] == '-');
      out += ' ';
      out += c > 0 && numeric ? fmt::format("{:>{}}", cell, width[c]) : fmt::format("{:<{}}", cell, width[c]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    fmt::print("{}\n", out);
  };
  line(headers_);
  size_t total = 1;
  for (size_t w : width) total += w + 1;
  fmt::print("  {}\n", std::string(total - 1, '-'));
  for (const auto& r : rows_) line(r);
  std::fflush(stdout);
}

std::string format_number(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }

void verdict(const std::string& text) {
  fmt::print("  verdict: {}\n\n", text);
  std::fflush(stdout);
}

void title(const std::string& name, const std::string& what) {
  fmt::print("== {}: {}\n", name, what);
  std::fflush(stdout);
}

int host_threads() { return omp_get_max_threads(); }

std::string cpu_blas() {
  return kiln::build_info().find("onemkl") != std::string::npos ? "OpenBLAS + oneMKL" : "OpenBLAS";
}

using kiln::json_quote;

void write_json(const BenchContext& ctx, const std::string& path) {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  const std::string device = ctx.gpu() ? device_properties(ctx.device).name : "cpu";
  std::string s = "{\n";
  s += fmt::format("  \"tool\": \"kiln\",\n  \"version\": {},\n  \"device\": {},\n  \"date\": {},\n",
                   json_quote(kVersion), json_quote(device), json_quote(date));
  s += fmt::format("  \"host_threads\": {},\n  \"quick\": {},\n  \"records\": [\n", host_threads(),
                   ctx.quick ? "true" : "false");
  for (size_t i = 0; i < ctx.records.size(); ++i) {
    const Record& r = ctx.records[i];
    s += fmt::format(
        "    {{\"workload\": {}, \"case\": {}, \"metric\": {}, \"unit\": {}, \"value\": {}, \"higher_is_better\": "
        "{}{}}}{}\n",
        json_quote(r.workload), json_quote(r.case_name), json_quote(r.metric), json_quote(r.unit),
        kiln::json_number(r.value), r.higher_is_better ? "true" : "false",
        r.check.empty() ? "" : ", \"check\": " + json_quote(r.check), i + 1 < ctx.records.size() ? "," : "");
  }
  s += "  ],\n  \"skipped\": [";
  for (size_t i = 0; i < ctx.skipped.size(); ++i)
    s += fmt::format("{}{{\"what\": {}, \"reason\": {}}}", i ? ", " : "", json_quote(ctx.skipped[i].first),
                     json_quote(ctx.skipped[i].second));
  s += "]\n}\n";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw ValueError("kiln bench --json: cannot open " + path + " for writing; check the folder exists");
  bool ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) throw ValueError("kiln bench --json: failed writing " + path + " (disk full?)");
}

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> list = {
      {"matmul", "float32 matmul, CPU (all cores) vs GPU", run_matmul},
      {"timing", "the same GPU work timed wrongly and rightly", run_timing},
      {"transfer", "host<->device bandwidth, pageable vs pinned", run_transfer},
      {"overlap", "copy/compute pipeline on two streams vs serial", run_overlap},
      {"logging", "1000 steps logging a norm: copy every step vs keep on the device", run_logging},
      {"elementwise", "copy, add, add scalar bandwidth", run_elementwise},
      {"reduction", "full-array sum bandwidth", run_reduction},
      {"overhead", "host cost of small ops", run_overhead},
      {"fusion", "the chain tanh(x*1.5+0.3)*x - exp(-x*x)*0.5", run_fusion},
      {"alloc", "caching allocator latency", run_alloc},
      {"multigpu", "two matmuls on two GPUs at once vs one after the other", run_multigpu},
      {"train", "seconds per epoch of two MLPs on Fashion-MNIST (eager, graph, CPU)", run_train},
      {"resnet50", "ResNet-50 inference and training step (GPU), inference (CPU)", run_resnet50},
  };
  return list;
}

}  // namespace kiln_cli
