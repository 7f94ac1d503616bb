// `kiln bench` workloads about using a GPU right: timing (wrong vs right),
// transfer (pageable vs pinned), overlap (two streams), logging (sync per step).
#include <algorithm>
#include <cmath>
#include <functional>

#include "bench_common.hpp"

namespace kiln_cli {

using namespace kiln;

void run_timing(BenchContext& ctx) {
  // On a GPU the schema's 4096 matmul; on the CPU a 1024 one (synchronous work: all three must agree).
  const int64_t n = ctx.gpu() ? 4096 : 1024;
  title("timing", fmt::format("one {}x{} float32 matmul on {}, timed three ways", n, n, ctx.device.str()));
  Array a = random::uniform({n, n}, float32, ctx.device), b = random::uniform({n, n}, float32, ctx.device);
  for (int i = 0; i < 3; ++i) (void)matmul(a, b);  // warm-up (cuBLAS handles, kernel selection)
  synchronize(ctx.device);
  const int repeat = ctx.quick ? 5 : 20;
  std::vector<double> no_sync, with_sync;
  for (int r = 0; r < repeat; ++r) {
    // WRONG ON PURPOSE: a host clock around an asynchronous launch measures only the launch.
    double t0 = now_s();
    (void)matmul(a, b);
    double t1 = now_s();
    no_sync.push_back(t1 - t0);
    synchronize(ctx.device);  // outside the (wrong) measurement, so each sample starts idle
  }
  for (int r = 0; r < repeat; ++r) {
    // Right, with the host clock: synchronise before stopping it (includes launch and sync latency).
    double t0 = now_s();
    (void)matmul(a, b);
    synchronize(ctx.device);
    with_sync.push_back(now_s() - t0);
  }
  BenchResult events = bench(
      "events", [&] { (void)matmul(a, b); }, ctx.options(0, 20, 5));
  const double wrong = summarize(no_sync).median, host = summarize(with_sync).median, right = ctx.seconds(events);
  ctx.record("timing", "host_clock_no_sync", "seconds", "s", wrong, false);
  ctx.record("timing", "host_clock_sync", "seconds", "s", host, false);
  ctx.record("timing", "events", "seconds", "s", right, false);
  Table table({"case", "how", "median", "vs events"});
  table.row({"host_clock_no_sync", "WRONG: t0; matmul; t1 (no synchronisation)", format_seconds(wrong),
             format_number(wrong / right, 3) + "x"});
  table.row(
      {"host_clock_sync", "t0; matmul; synchronize; t1", format_seconds(host), format_number(host / right, 3) + "x"});
  table.row({"events",
             ctx.gpu() ? "kiln::bench: CUDA events around the work, median" : "kiln::bench (host clock on the CPU)",
             format_seconds(right), "1.000x"});
  table.print();
  if (ctx.gpu())
    verdict(
        fmt::format("a host clock without synchronisation reports {} for {} of GPU work ({:.0f}x too fast): "
                    "synchronise, or time with events (kiln::bench, kiln::Timer)",
                    format_seconds(wrong), format_seconds(right), right / wrong));
  else
    verdict(
        "on the CPU work is synchronous, so the three agree; on a GPU the first one is wrong by orders of magnitude");
}

void run_transfer(BenchContext& ctx) {
  title("transfer", "host<->device copies into existing buffers, pageable vs pinned host memory (GB/s = 1e9 B/s)");
  if (!ctx.gpu()) {
    ctx.skip("transfer", ctx.no_gpu_reason() + ": host<->device copies need one");
    verdict("skipped");
    return;
  }
  const std::vector<int64_t> sizes_mb =
      ctx.quick ? std::vector<int64_t>{16, 256} : std::vector<int64_t>{1, 16, 256, 1024};
  Table table({"MiB", "H2D pageable", "H2D pinned", "D2H pageable", "D2H pinned"});
  double pinned_h2d = 0, pageable_h2d = 0;
  for (int64_t mb : sizes_mb) {
    const int64_t n = mb * (int64_t{1} << 20) / 4;
    const double bytes = 4.0 * static_cast<double>(n);
    Array h = random::uniform({n}, float32, cpu());
    Array hp = h.pin_memory();
    Array dev = empty({n}, float32, ctx.device);
    // Host time: the copy as the program sees it, ending when the data is usable (bench synchronises).
    auto gbps = [&](const std::string& name, const std::function<void()>& fn) {
      BenchResult r = bench(name, fn, ctx.options(2, 15, 5));
      double v = bytes / r.host().median / 1e9;
      ctx.record("transfer", name + "_" + std::to_string(mb), "gbps", "GB/s", v, true);
      return v;
    };
    double h2d = gbps("h2d_pageable", [&] { dev.copy_from(h); });
    double h2dp = gbps("h2d_pinned", [&] { dev.copy_from(hp, {.non_blocking = true}); });
    double d2h = gbps("d2h_pageable", [&] { h.copy_from(dev); });
    double d2hp = gbps("d2h_pinned", [&] { hp.copy_from(dev, {.non_blocking = true}); });
    table.row({std::to_string(mb), format_number(h2d), format_number(h2dp), format_number(d2h), format_number(d2hp)});
    pinned_h2d = h2dp;
    pageable_h2d = h2d;
  }
  table.print();
  verdict(
      fmt::format("at {} MiB pinned host memory copies to the GPU at {:.1f} GB/s, pageable at {:.1f} GB/s ({:.1f}x)",
                  sizes_mb.back(), pinned_h2d, pageable_h2d, pinned_h2d / pageable_h2d));
}

void run_overlap(BenchContext& ctx) {
  const int chunks = 16;
  const int64_t chunk = (int64_t{64} << 20) / 4;  // 64 MiB of float32
  title("overlap", fmt::format("{} chunks of 64 MiB: H2D, x*2+1 ten times, D2H; two streams vs one", chunks));
  if (!ctx.gpu()) {
    ctx.skip("overlap", ctx.no_gpu_reason() + ": streams and copy engines need one");
    verdict("skipped");
    return;
  }
  const Device d = ctx.device;
  Array host_in = random::uniform({chunks * chunk}, float32, cpu()).pin_memory();
  Array host_out = empty({chunks * chunk}, float32, cpu(), {.pinned = true});
  Stream streams[2] = {Stream::create(d, {.non_blocking = true}), Stream::create(d, {.non_blocking = true})};
  Array buffers[2];
  for (int s = 0; s < 2; ++s) {
    StreamGuard g(streams[s]);
    buffers[s] = empty({chunk}, float32, d);  // allocated on (and reused only by) its stream
  }
  auto compute = [](Array& x) {
    for (int k = 0; k < 10; ++k) {
      multiply(x, 2.0f, x);
      add(x, 1.0f, x);
    }
  };
  // One chunk's pipeline on the current stream: copy in, compute, copy out (asynchronous: pinned memory).
  auto stage = [&](int i, Array& buf, bool copies, bool kernels) {
    if (copies) buf.copy_from(host_in.slice(0, i * chunk, (i + 1) * chunk), {.non_blocking = true});
    if (kernels) compute(buf);
    if (copies) host_out.slice(0, i * chunk, (i + 1) * chunk).copy_from(buf, {.non_blocking = true});
  };
  // Serial: everything on one stream. Overlapped: chunk i on stream i % 2, so chunk i's copies overlap chunk
  // i-1's kernels; then the current stream waits for both (so the end event covers them).
  auto run = [&](bool two_streams, bool copies, bool kernels) {
    if (!two_streams) {
      StreamGuard g(streams[0]);
      for (int i = 0; i < chunks; ++i) stage(i, buffers[0], copies, kernels);
    } else {
      for (int i = 0; i < chunks; ++i) {
        StreamGuard g(streams[i % 2]);
        stage(i, buffers[i % 2], copies, kernels);
      }
    }
    for (Stream& s : streams) {
      Event e = Event::create(d, false);
      e.record(s);
      e.wait(Stream::current(d));
    }
  };
  auto time = [&](const char* name, bool two, bool copies, bool kernels) {
    return ctx.seconds(bench(
        name, [&] { run(two, copies, kernels); }, ctx.options(1, 6, 10)));
  };
  const double serial = time("serial", false, true, true);
  const double overlapped = time("overlapped", true, true, true);
  // Check what the overlapped run wrote: every element went through x*2+1 ten times (x*1024 + 1023).
  bool ok = true;
  for (int64_t start : {int64_t{0}, (chunks - 1) * chunk}) {
    std::vector<float> in = host_in.slice(0, start, start + 4096).to_vector<float>();
    std::vector<float> out = host_out.slice(0, start, start + 4096).to_vector<float>();
    for (size_t i = 0; i < in.size(); ++i)
      ok = ok && std::abs(out[i] - (in[i] * 1024.0f + 1023.0f)) <=
                     1e-2f;  // float rounding of 20 ops; a missing op is off by hundreds
  }
  const double copy_only = time("copies only", false, true, false);
  const double compute_only = time("kernels only", false, false, true);
  const double hidden = std::clamp((serial - overlapped) / copy_only, 0.0, 1.0);
  const std::string check = ok ? "ok" : "RESULT WRONG: output chunks differ from x*1024 + 1023";
  ctx.record("overlap", "serial", "seconds", "s", serial, false, check);
  ctx.record("overlap", "overlapped", "seconds", "s", overlapped, false, check);
  ctx.record("overlap", "copy_only", "seconds", "s", copy_only, false);
  ctx.record("overlap", "overlapped", "hidden_copy_fraction", "fraction", hidden, true);
  Table table({"case", "time", "note"});
  table.row({"copies only", format_seconds(copy_only), "H2D + D2H of 1 GiB each way, one stream"});
  table.row({"kernels only", format_seconds(compute_only), "20 elementwise kernels per chunk"});
  table.row({"serial", format_seconds(serial), "one stream"});
  table.row({"overlapped", format_seconds(overlapped), ok ? "two streams, pinned buffers; result ok" : "RESULT WRONG"});
  table.print();
  verdict(fmt::format("two streams hide {:.0f}% of the copy time ({} -> {}, {:.2f}x)", 100 * hidden,
                      format_seconds(serial), format_seconds(overlapped), serial / overlapped));
}

void run_logging(BenchContext& ctx) {
  const int steps = 1000;
  title("logging", fmt::format("{} steps x = tanh(x @ w) on 100x100 float32, logging ||x||_F each step, on {}", steps,
                               ctx.device.str()));
  const Device d = ctx.device;
  Array x0 = random::normal({100, 100}, float32, d), w = random::normal({100, 100}, 0.0, 0.1, float32, d);
  std::vector<float> host_log;
  Array device_log = empty({steps}, float32, d);
  std::vector<float> copied;
  auto copy_every_step = [&] {
    host_log.clear();
    Array x = x0;
    for (int i = 0; i < steps; ++i) {
      x = tanh(matmul(x, w));
      host_log.push_back(linalg::norm(x).item<float>());  // a D2H copy and a synchronisation per step
    }
  };
  auto on_device = [&] {
    Array x = x0;
    for (int i = 0; i < steps; ++i) {
      x = tanh(matmul(x, w));
      device_log.index({i}).assign(linalg::norm(x));  // stays on the device
    }
    copied = device_log.to_vector<float>();  // one copy at the end
  };
  auto measure = [&](const char* name, const std::function<void()>& fn, SyncCounters& counted) {
    BenchResult r = bench(name, fn, ctx.options(1, 6, 10));
    SyncDebugGuard guard(SyncDebugMode::off);  // counts one more run
    fn();
    counted = guard.counters();
    return r.host().median;  // the loop as the program experiences it, final copy included
  };
  SyncCounters every{}, once{};
  const double every_s = measure("copy_every_step", copy_every_step, every);
  const double once_s = measure("on_device", on_device, once);
  bool same = host_log.size() == copied.size();
  for (size_t i = 0; same && i < copied.size(); ++i)
    same = std::abs(host_log[i] - copied[i]) <= 1e-5f * std::abs(copied[i]);
  const std::string check = same ? "ok" : "NORMS DIFFER: the on-device log differs from the per-step one";
  ctx.record("logging", "copy_every_step", "seconds", "s", every_s, false, check);
  ctx.record("logging", "on_device", "seconds", "s", once_s, false, check);
  ctx.record("logging", "copy_every_step", "syncs", "count", static_cast<double>(every.syncs), false);
  ctx.record("logging", "on_device", "syncs", "count", static_cast<double>(once.syncs), false);
  Table table({"case", "time", "syncs", "D2H copies", "check"});
  table.row(
      {"copy_every_step", format_seconds(every_s), std::to_string(every.syncs), std::to_string(every.d2h_copies), "-"});
  table.row({"on_device", format_seconds(once_s), std::to_string(once.syncs), std::to_string(once.d2h_copies),
             same ? "same norms" : "NORMS DIFFER"});
  table.print();
  if (ctx.gpu())
    verdict(fmt::format("keeping the log on the device makes the loop {:.1f}x faster ({} syncs -> {})",
                        every_s / once_s, every.syncs, once.syncs));
  else
    verdict(
        fmt::format("on the CPU there is nothing to synchronise (0 syncs either way, {:.2f}x); on a GPU each "
                    "item() stalls the loop",
                    every_s / once_s));
}

}  // namespace kiln_cli
