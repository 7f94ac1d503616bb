// `kiln bench` workloads about host costs and scaling: overhead (small ops),
// alloc (caching allocator), multigpu (two GPUs at once).
#include <functional>

#include "bench_common.hpp"
#ifdef KILN_WITH_CUDA
#include "kiln/cuda.hpp"  // cuda::Graph
#endif

namespace kiln_cli {

using namespace kiln;

void run_overhead(BenchContext& ctx) {
  const int ops = 10000;
  title("overhead", fmt::format("{} ops in a row on 1000 float32 on {}, host wall per op including the final sync", ops,
                                ctx.device.str()));
  Array x = random::normal({1000}, float32, ctx.device), y = random::normal({1000}, float32, ctx.device);
  Table table({"case", "us per op", "what"});
  auto per_op = [&](const char* name, const std::function<void()>& one, const char* what) {
    BenchResult r = bench(
        name,
        [&] {
          for (int i = 0; i < ops; ++i) one();
        },
        ctx.options(1, 6, 10));
    const double us = r.host().median / ops * 1e6;  // host time: ends after synchronising the device
    ctx.record("overhead", name, "us_per_op", "us", us, false);
    table.row({name, format_number(us, 2), what});
    return us;
  };
  Array z = x;
  const double small_add = per_op(
      "small_add", [&] { z = z + y; }, "z = z + y (allocates the result)");
  per_op(
      "small_add_out", [&] { add(x, y, x); }, "add(x, y, x) into an existing array");
  if (ctx.gpu()) {
    // The launch floor through the public RawKernel, as the CuPy peer launches a cupy.RawKernel; the stream is
    // looked up once, outside the timed loop.
    const RawModule module("extern \"C\" __global__ void kiln_empty_kernel() {}", {.device = ctx.device});
    const RawKernel empty_kernel = module.function("kiln_empty_kernel");
    const LaunchOptions on_current{.stream = Stream::current(ctx.device)};
    per_op(
        "empty_launch", [&] { empty_kernel.launch({1}, {32}, on_current); },
        "an empty kernel (RawKernel): the launch floor");
  }
  if (!ctx.gpu()) ctx.skip("overhead empty_launch", ctx.no_gpu_reason() + ": no kernel to launch");
#ifdef KILN_WITH_CUDA
  if (ctx.gpu()) {
    // 100 small in-place adds captured once into a CUDA graph, replayed ops / 100 times: one launch per 100 ops.
    constexpr int kGraphOps = 100;
    Stream capture_stream = Stream::create(ctx.device, {.non_blocking = true});
    cuda::Graph graph;
    {
      cuda::GraphCapture capture(graph, capture_stream);
      for (int i = 0; i < kGraphOps; ++i) add(x, y, x);
    }
    BenchResult r = bench(
        "graph_replay",
        [&] {
          for (int i = 0; i < ops / kGraphOps; ++i) graph.replay();
        },
        ctx.options(1, 6, 10));
    const double us = r.host().median / ops * 1e6;
    ctx.record("overhead", "graph_replay", "us_per_op", "us", us, false);
    table.row({"graph_replay", format_number(us, 2), "a CUDA graph of 100 add(x, y, x), replayed"});
  }
#endif
  if (!ctx.gpu()) ctx.skip("overhead graph_replay", ctx.no_gpu_reason() + ": CUDA graphs need a GPU");
  table.print();
  verdict(
      fmt::format("a small add costs {:.2f} us of host time on {}: below a few microseconds, fuse or capture a graph",
                  small_add, ctx.device.str()));
}

void run_alloc(BenchContext& ctx) {
  const int ops = 10000;
  title("alloc", fmt::format("alloc + free of 1 MiB float32 arrays on {}", ctx.device.str()));
  BenchResult r = bench(
      "alloc_free_1MB",
      [&] {
        for (int i = 0; i < ops; ++i) (void)empty({int64_t{1} << 18}, float32, ctx.device);
      },
      ctx.options(1, 6, 5));
  const double us = r.host().median / ops * 1e6;
  ctx.record("alloc", "alloc_free_1MB", "us", "us", us, false);
  Table table({"case", "us", "allocator"});
  table.row({"alloc_free_1MB", format_number(us, 3), ctx.gpu() ? "kiln caching allocator" : "host allocator"});
  table.print();
  verdict(ctx.gpu() ? fmt::format("a cached 1 MiB GPU allocation costs {:.2f} us (cudaMalloc costs far more)", us)
                    : fmt::format("a 1 MiB host allocation costs {:.2f} us", us));
}

void run_multigpu(BenchContext& ctx) {
  title("multigpu", "two 8192x8192 float32 matmuls (x10 each) on two GPUs at once vs one after the other on one");
  if (num_gpus() < 2) {
    ctx.skip("multigpu", fmt::format("needs two GPUs, this machine has {}", num_gpus()));
    verdict("skipped");
    return;
  }
  const int64_t n = 8192;
  const int reps = 10;
  const Device g0 = gpu(0), g1 = gpu(1);
  Array a0 = random::uniform({n, n}, float32, g0), b0 = random::uniform({n, n}, float32, g0);
  Array a1 = random::uniform({n, n}, float32, g1), b1 = random::uniform({n, n}, float32, g1);
  BenchOptions o = ctx.options(1, 6, 20);
  o.devices = {g0, g1};
  // Host time (bench synchronises both GPUs before stopping the clock): the wall time of the whole job.
  BenchResult one = bench(
      "one_gpu",
      [&] {
        for (int i = 0; i < 2 * reps; ++i) (void)matmul(a0, b0);
      },
      o);
  BenchResult two = bench(
      "two_gpus",
      [&] {
        for (int i = 0; i < reps; ++i) {  // launches are asynchronous: both GPUs work at once
          (void)matmul(a0, b0);
          (void)matmul(a1, b1);
        }
      },
      o);
  const double t1 = one.host().median, t2 = two.host().median;
  ctx.record("multigpu", "one_gpu", "seconds", "s", t1, false);
  ctx.record("multigpu", "two_gpus", "seconds", "s", t2, false);
  ctx.record("multigpu", "two_gpus", "speedup", "x", t1 / t2, true);
  Table table({"case", "time", "TFLOP/s"});
  const double flops = 2.0 * 2 * reps * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  table.row({"one_gpu", format_seconds(t1), format_number(flops / t1 / 1e12)});
  table.row({"two_gpus", format_seconds(t2), format_number(flops / t2 / 1e12)});
  table.print();
  verdict(fmt::format("two GPUs finish the same work {:.2f}x faster (2.00x is perfect)", t1 / t2));
}

}  // namespace kiln_cli
