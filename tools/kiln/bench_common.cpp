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

void write_json(const BenchContext& ctx, const std::string& path) {
  using benchutil::JsonObject;
  JsonObject out;
  out.str("tool", "kiln").str("version", kVersion);
  out.str("device", ctx.gpu() ? device_properties(ctx.device).name : "cpu").str("date", benchutil::utc_date());
  out.raw("host_threads", std::to_string(host_threads())).boolean("quick", ctx.quick);
  std::vector<std::string> records, skipped;
  for (const Record& r : ctx.records)
    records.push_back(fmt::format(
        "{{\"workload\": {}, \"case\": {}, \"metric\": {}, \"unit\": {}, \"value\": {}, \"higher_is_better\": {}{}}}",
        json_quote(r.workload), json_quote(r.case_name), json_quote(r.metric), json_quote(r.unit),
        json_number(r.value), r.higher_is_better ? "true" : "false",
        r.check.empty() ? "" : ", \"check\": " + json_quote(r.check)));
  for (const auto& [what, reason] : ctx.skipped)
    skipped.push_back(fmt::format("{{\"what\": {}, \"reason\": {}}}", json_quote(what), json_quote(reason)));
  out.array("records", records).array("skipped", skipped);
  const std::string error = benchutil::write_file(path, out.text());
  if (!error.empty()) throw ValueError("kiln bench --json: " + error);
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
      {"attention", "scaled dot-product attention forward and forward+backward TFLOP/s", run_attention},
      {"lstm", "a 2-layer LSTM (hidden 1024, 256 steps, batch 64) forward and forward+backward", run_lstm},
      {"generate", "GPT-2 124M greedy generation with the KV cache, seconds per token", run_generate},
      {"gpt2", "a GPT-2 124M training step (bf16 autocast, AdamW, clip), eager and CUDA graph", run_gpt2},
  };
  return list;
}

}  // namespace kiln_cli
