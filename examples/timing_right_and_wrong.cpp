// Walkthrough 6: timing GPU work right, and how wrong the obvious way is.
//
//   build/cuda/examples/example_timing_right_and_wrong [N]     (default 4096; 256 without a GPU)
//
// GPU operations are queued: matmul() returns as soon as the work is enqueued. So
//   1. a host clock around the call, without a synchronise, measures the launch only (wrong);
//   2. a host clock around the call and a synchronize(d) measures the work plus the host's
//      wake-up latency (right for "how long until I have the result");
//   3. two events recorded in the stream around the call measure the GPU's time (right for
//      "how fast is this kernel"), without stalling the host between calls.
// The first call also pays one-time costs (cuBLAS handle, kernel choice, allocation), so it
// is reported apart: warm up, then take the median. On the CPU all three agree, because
// CPU work is done when the call returns.
#include <kiln/kiln.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace kiln;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  const bool have_gpu = num_gpus() > 0;
  const Device d = try_gpu();
  const int64_t n = argc > 1 ? std::strtoll(argv[1], nullptr, 10) : (have_gpu ? 4096 : 256);
  if (n <= 0) {
    std::fprintf(stderr, "usage: example_timing_right_and_wrong [N] (a positive size)\n");
    return 2;
  }
  if (!have_gpu) std::printf("no GPU: timing a %lld^2 matmul on the CPU, where all three methods agree\n",
                             static_cast<long long>(n));
  random::seed(1);
  Array a = random::normal({n, n}, float32, d), b = random::normal({n, n}, float32, d);
  Array c;
  synchronize(d);

  // The first call, synchronised: one-time costs included.
  auto t0 = Clock::now();
  c = matmul(a, b);
  synchronize(d);
  const double first = since(t0);

  const int repeat = 10;
  std::vector<double> no_sync, with_sync, events;
  for (int r = 0; r < repeat; ++r) {
    synchronize(d);  // start each sample from an idle device
    t0 = Clock::now();
    c = matmul(a, b);
    no_sync.push_back(since(t0));  // WRONG: the GPU has only been told what to do
    synchronize(d);
  }
  for (int r = 0; r < repeat; ++r) {
    t0 = Clock::now();
    c = matmul(a, b);
    synchronize(d);  // right: the clock stops when the result exists
    with_sync.push_back(since(t0));
  }
  Event start = Event::create(d), end = Event::create(d);
  for (int r = 0; r < repeat; ++r) {
    start.record();
    c = matmul(a, b);
    end.record();
    end.synchronize();  // wait for `end` before reading the elapsed time
    events.push_back(start.elapsed_ms(end) / 1e3);
  }

  // kiln::summarize gives the median of the samples (and min, mean, max, stddev).
  const double flops = 2.0 * n * n * n;
  auto line = [&](const char* what, double s) {
    std::printf("  %-34s %10.3f ms  -> %8.3f TFLOP/s\n", what, s * 1e3, flops / s / 1e12);
  };
  std::printf("%lld^2 float32 matmul on %s, median of %d after warm-up:\n", static_cast<long long>(n),
              d.str().c_str(), repeat);
  line("host clock, no synchronise (WRONG)", summarize(no_sync).median);
  line("host clock + synchronize(d)", summarize(with_sync).median);
  line("events in the stream", summarize(events).median);
  line("first call (one-time costs)", first);
  if (have_gpu)
    std::printf("the unsynchronised clock under-reports the work %.0fx\n",
                summarize(events).median / summarize(no_sync).median);

  // What was timed must also be right: one element against a float64 dot product on the CPU.
  Array row = a.index({0}).to(cpu()).astype(float64), col = b.index({Slice(), 0}).to(cpu()).astype(float64);
  const double want = (row * col).sum().item<double>();
  const double got = c.index({0, 0}).item<float>();
  if (!(std::abs(got - want) <= 1e-4 * (1.0 + std::abs(want)))) {
    std::fprintf(stderr, "CHECK FAILED: c[0, 0] = %g, float64 reference %g\n", got, want);
    return 1;
  }
  std::printf("c[0, 0] = %.4f matches the float64 reference %.4f\n", got, want);
  return 0;
}
