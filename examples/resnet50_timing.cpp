// Walkthrough: timing ResNet-50 inference on the CPU and on the GPU, first wrongly, then rightly.
//
//   build/cuda/examples/example_resnet50_timing [BATCH]   (default 128 with a GPU, 4 without)
//
// The network (kiln::models::resnet50, torchvision's layout, random weights) classifies a batch of 224x224
// images in evaluation mode without gradients. On the GPU the forward returns once its ~170 kernels are queued,
// so:
//   1. the first call pays one-time costs (cuDNN's algorithm choice, kernel loading, the caching allocator's
//      first blocks): it is reported apart, and the rest warm up first;
//   2. a host clock around the call without synchronising measures the queueing only (WRONG: this is how a
//      walkthrough finds a "1883x" speed-up that does not exist);
//   3. a host clock around the call and synchronize() measures the result's latency (right);
//   4. CUDA events around the call measure the GPU's time without stalling the host between calls (right).
// On the CPU the forward is done when it returns, so the ways agree there. The speed-up printed at the end
// compares the right figures, per image.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <vector>

using namespace kiln;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Timings {
  double first = 0, no_sync = 0, with_sync = 0, events = 0;
};

Timings time_inference(Device d, int64_t batch, int repeat) {
  random::seed(0);
  auto net = models::resnet50(1000, float32, d);
  net->eval();
  const Array x = random::normal({batch, 3, 224, 224}, 0.0, 1.0, float32, d);
  NoGradGuard no_grad;  // inference: no graph is recorded
  Array logits;
  Timings t;
  synchronize(d);
  auto t0 = Clock::now();
  logits = (*net)(x);
  synchronize(d);
  t.first = since(t0);                             // one-time costs included
  for (int i = 0; i < 2; ++i) logits = (*net)(x);  // warm-up
  synchronize(d);
  std::vector<double> no_sync, with_sync, events;
  for (int r = 0; r < repeat; ++r) {
    t0 = Clock::now();
    logits = (*net)(x);
    no_sync.push_back(since(t0));  // WRONG on a GPU: the work is only queued
    synchronize(d);                // outside the measurement, so the next sample starts idle
  }
  for (int r = 0; r < repeat; ++r) {
    t0 = Clock::now();
    logits = (*net)(x);
    synchronize(d);  // right: the clock stops when the logits exist
    with_sync.push_back(since(t0));
  }
  if (d.is_cuda()) {
    Event start = Event::create(d), end = Event::create(d);
    for (int r = 0; r < repeat; ++r) {
      start.record();
      logits = (*net)(x);
      end.record();
      end.synchronize();
      events.push_back(start.elapsed_ms(end) / 1e3);
    }
  }
  t.no_sync = median(no_sync);
  t.with_sync = median(with_sync);
  t.events = events.empty() ? t.with_sync : median(events);
  const Array top = argmax(logits, 1);
  std::printf("  %s: logits %s, top-1 class of image 0: %lld\n", d.str().c_str(), shape_str(logits.shape()).c_str(),
              static_cast<long long>(top[0].item<int64_t>()));
  return t;
}

void report(const char* where, const Timings& t, int64_t batch) {
  std::printf("%s, batch %lld:\n", where, static_cast<long long>(batch));
  std::printf("  first call (one-time costs included)   %10.2f ms\n", t.first * 1e3);
  std::printf("  host clock, no synchronize (WRONG)     %10.2f ms\n", t.no_sync * 1e3);
  std::printf("  host clock + synchronize               %10.2f ms\n", t.with_sync * 1e3);
  std::printf("  CUDA events (kiln's Event)             %10.2f ms%s\n", t.events * 1e3,
              std::string(where).find("cuda") == std::string::npos ? "  (the CPU: the host clock)" : "");
}

}  // namespace

int main(int argc, char** argv) {
  const bool have_gpu = num_gpus() > 0;
  const int64_t batch = argc > 1 ? std::strtoll(argv[1], nullptr, 10) : (have_gpu ? 128 : 4);
  if (batch <= 0) {
    std::fprintf(stderr, "usage: example_resnet50_timing [BATCH] (a positive batch size)\n");
    return 2;
  }
  cudnn::set_benchmark(true);  // time cuDNN's algorithms once per shape (in the first call), keep the fastest
  const Timings cpu_t = time_inference(cpu(), batch, 2);
  report("cpu", cpu_t, batch);
  if (!have_gpu) {
    std::printf("no GPU: on the CPU the three ways agree; run on a GPU machine for the wrong one's surprise\n");
    return 0;
  }
  const Timings gpu_t = time_inference(gpu(0), batch, 10);
  report(gpu(0).str().c_str(), gpu_t, batch);
  std::printf(
      "speed-up of the GPU over the CPU: %.0fx measured wrongly (no synchronize), %.1fx with synchronize, "
      "%.1fx with events\n",
      cpu_t.with_sync / gpu_t.no_sync, cpu_t.with_sync / gpu_t.with_sync, cpu_t.with_sync / gpu_t.events);
  return 0;
}
