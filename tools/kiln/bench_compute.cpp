// `kiln bench` compute workloads: matmul (CPU vs GPU), elementwise, reduction, fusion.
#include <cmath>
#include <functional>

#include "bench_common.hpp"

namespace kiln_cli {

using namespace kiln;

void run_matmul(BenchContext& ctx) {
  title("matmul", "float32 C = A @ B, CPU (all cores, " + cpu_blas() + ") vs GPU (cuBLAS, TF32 off)");
  const std::vector<int64_t> sizes =
      ctx.quick ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{1024, 2048, 4096, 8192, 15360};
  if (!ctx.gpu()) ctx.skip("matmul gpu_N", ctx.no_gpu_reason() + ": the CPU side runs alone");
  Table table({"n", "cpu", "cpu TFLOP/s", "gpu", "gpu TFLOP/s", "speed-up"});
  double best_speedup = 0, best_gpu = 0, best_cpu = 0;
  int64_t best_n = 0;
  for (int64_t n : sizes) {
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    const std::string key = std::to_string(n);
    double cpu_s = 0, gpu_s = 0;
    {
      Array a = random::uniform({n, n}, float32, cpu()), b = random::uniform({n, n}, float32, cpu());
      // Large CPU products take seconds each: one warm-up only up to 4096, and max_seconds bounds the rest.
      BenchOptions o = ctx.options(n <= 4096 ? 1 : 0, 6, n <= 4096 ? 8 : 20);
      o.devices = {cpu()};  // host time only
      BenchResult r = bench(
          "cpu_" + key, [&] { (void)matmul(a, b); }, o);
      cpu_s = r.host().median;
      ctx.record("matmul", "cpu_" + key, "seconds", "s", cpu_s, false);
      ctx.record("matmul", "cpu_" + key, "tflops", "TFLOP/s", flops / cpu_s / 1e12, true);
    }
    if (ctx.gpu()) {
      Array a = random::uniform({n, n}, float32, ctx.device), b = random::uniform({n, n}, float32, ctx.device);
      BenchResult r = bench(
          "gpu_" + key, [&] { (void)matmul(a, b); }, ctx.options(3, 20, 10));
      gpu_s = ctx.seconds(r);
      ctx.record("matmul", "gpu_" + key, "seconds", "s", gpu_s, false);
      ctx.record("matmul", "gpu_" + key, "tflops", "TFLOP/s", flops / gpu_s / 1e12, true);
      ctx.record("matmul", "speedup_" + key, "x", "x", cpu_s / gpu_s, true);
      if (cpu_s / gpu_s > best_speedup) {
        best_speedup = cpu_s / gpu_s;
        best_n = n;
      }
      best_gpu = std::max(best_gpu, flops / gpu_s / 1e12);
    }
    best_cpu = std::max(best_cpu, flops / cpu_s / 1e12);
    table.row({key, format_seconds(cpu_s), format_number(flops / cpu_s / 1e12, 3),
               ctx.gpu() ? format_seconds(gpu_s) : "skipped", ctx.gpu() ? format_number(flops / gpu_s / 1e12, 1) : "-",
               ctx.gpu() ? format_number(cpu_s / gpu_s, 0) + "x" : "-"});
  }
  table.print();
  if (ctx.gpu())
    verdict(fmt::format("the GPU is {:.0f}x faster than {} CPU threads at n={} (GPU peak {:.1f} TFLOP/s, CPU {:.2f})",
                        best_speedup, host_threads(), best_n, best_gpu, best_cpu));
  else
    verdict(fmt::format("CPU only: {:.3f} TFLOP/s on {} threads; run on a GPU machine for the comparison", best_cpu,
                        host_threads()));
}

void run_elementwise(BenchContext& ctx) {
  const int64_t n = ctx.gpu() || !ctx.quick ? int64_t{1} << 28 : int64_t{1} << 24;
  const std::string size = ctx.gpu() || !ctx.quick ? "2^28" : "2^24";
  title("elementwise", fmt::format("float32, {} elements on {}", size, ctx.device.str()));
  Array a = random::uniform({n}, float32, ctx.device), c = random::uniform({n}, float32, ctx.device);
  Array b = empty({n}, float32, ctx.device);
  const double bytes = 4.0 * static_cast<double>(n);
  struct Case {
    const char* name;
    double bytes;
    std::function<void()> fn;
  };
  const std::vector<Case> cases = {
      {"copy", 2 * bytes, [&] { b.assign(a); }},
      {"add", 3 * bytes, [&] { add(a, c, b); }},
      {"add_scalar", 2 * bytes, [&] { add(a, 1.0f, b); }},
  };
  Table table({"case", "median", "GB/s", "of copy"});
  double copy = 0, add_share = 0;
  for (const Case& k : cases) {
    BenchResult r = bench(k.name, k.fn, ctx.options(3, 20, 5));
    const double gbps = k.bytes / ctx.seconds(r) / 1e9;
    if (std::string(k.name) == "copy") copy = gbps;
    if (std::string(k.name) == "add") add_share = gbps / copy;
    ctx.record("elementwise", k.name, "gbps", "GB/s", gbps, true);
    table.row({k.name, format_seconds(ctx.seconds(r)), format_number(gbps), format_number(100 * gbps / copy) + "%"});
  }
  ctx.copy_gbps_cache[n] = copy;
  table.print();
  verdict(fmt::format("add moves {:.0f}% of the bytes a plain copy moves per second ({:.0f} GB/s copy bandwidth on {})",
                      100 * add_share, copy, ctx.device.str()));
}

void run_reduction(BenchContext& ctx) {
  const int64_t n = ctx.gpu() || !ctx.quick ? int64_t{1} << 28 : int64_t{1} << 24;
  title("reduction", fmt::format("float32 full sum of {} elements on {}", ctx.gpu() || !ctx.quick ? "2^28" : "2^24",
                                 ctx.device.str()));
  Array a = random::uniform({n}, float32, ctx.device);
  Array s;
  BenchResult r = bench(
      "sum", [&] { s = a.sum(); }, ctx.options(3, 20, 5));
  const double gbps = 4.0 * static_cast<double>(n) / ctx.seconds(r) / 1e9;
  // Correctness of what was timed: uniform [0, 1) sums to about n/2 (a float64 CPU sum is the reference).
  const double got = s.item<float>();
  const double want = a.to(cpu()).astype(float64).sum().item<double>();
  const bool ok = std::abs(got - want) <= 1e-5 * want;
  const std::string check = ok ? "ok" : fmt::format("got {} want {}", got, want);
  ctx.record("reduction", "sum", "gbps", "GB/s", gbps, true, check);
  const double copy = ctx.copy_gbps(n);
  Table table({"case", "median", "GB/s", "of copy", "check"});
  table.row(
      {"sum", format_seconds(ctx.seconds(r)), format_number(gbps), format_number(100 * gbps / copy) + "%", check});
  table.print();
  verdict(fmt::format("a full sum reads at {:.0f}% of copy bandwidth ({:.0f} of {:.0f} GB/s)", 100 * gbps / copy, gbps,
                      copy));
}

void run_fusion(BenchContext& ctx) {
  const int64_t n = ctx.gpu() || !ctx.quick ? int64_t{1} << 26 : int64_t{1} << 22;
  title("fusion", fmt::format("tanh(x*1.5+0.3)*x - exp(-x*x)*0.5 on {} float32 on {}",
                              ctx.gpu() || !ctx.quick ? "2^26" : "2^22", ctx.device.str()));
  Array x = random::normal({n}, float32, ctx.device);
  auto chain = [&] { return tanh(x * 1.5f + 0.3f) * x - exp(-x * x) * 0.5f; };
  BenchResult eager = bench(
      "eager", [&] { (void)chain(); }, ctx.options(3, 20, 5));
  const double eager_ms = ctx.seconds(eager) * 1e3;
  // The floor: one read of x and one write of the result at copy bandwidth. On a GPU the bandwidth of the
  // 2^28 copy (elementwise's, as the peers use), on the CPU that of a copy of this size.
  const double gbps = ctx.gpu() ? ctx.copy_gbps(int64_t{1} << 28) : ctx.copy_gbps(n);
  const double floor_ms = 2.0 * 4.0 * static_cast<double>(n) / (gbps * 1e9) * 1e3;
  ctx.record("fusion", "eager", "ms", "ms", eager_ms, false);
  ctx.record("fusion", "eager", "x_floor", "x", eager_ms / floor_ms, false);
  ctx.record("fusion", "floor", "ms", "ms", floor_ms, false);
  Table table({"case", "ms", "x floor"});
  table.row({"eager (op by op)", format_number(eager_ms, 3), format_number(eager_ms / floor_ms, 2)});
  auto fused_chain = fuse([](auto v) { return tanh(v * 1.5f + 0.3f) * v - exp(-v * v) * 0.5f; }, "bench_chain");
  Array y_fused;
  BenchResult fused = bench(
      "fused", [&] { y_fused = fused_chain(x); }, ctx.options(3, 20, 5));
  const double fused_ms = ctx.seconds(fused) * 1e3;
  // Correctness of what was timed: the fused result against the op-by-op one.
  const double error = abs(y_fused - chain()).max().item<float>();
  const std::string check = error <= 1e-5 ? "ok" : fmt::format("fused differs from op by op by up to {}", error);
  ctx.record("fusion", "fused", "ms", "ms", fused_ms, false, check);
  ctx.record("fusion", "fused", "x_floor", "x", fused_ms / floor_ms, false);
  table.row({ctx.gpu() ? "fused (kiln::fuse, one kernel)" : "kiln::fuse on the CPU (one blocked pass)",
             format_number(fused_ms, 3), format_number(fused_ms / floor_ms, 2)});
  table.row({"floor (1 read + 1 write at copy bandwidth)", format_number(floor_ms, 3), "1.00"});
  table.print();
  if (check != "ok") fmt::print("  check: {}\n", check);
  verdict(fmt::format("op by op the chain takes {:.1f}x the bandwidth floor, fused {:.2f}x{}", eager_ms / floor_ms,
                      fused_ms / floor_ms,
                      ctx.gpu() ? ": every eager op reads and writes memory, the fused kernel reads x once"
                                : ": every eager op reads and writes memory, the fused pass reads x once"));
}

}  // namespace kiln_cli
