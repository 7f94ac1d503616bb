// Walkthrough 7 (its logging half): keep logs on the device so the loop never stalls.
//
//   build/cuda/examples/example_logging_on_device
//
// A loop of 1000 steps, each a 100x100 float32 matrix product (a normalised power
// iteration: Y = A X, log ||Y||, X = Y / ||Y||), records one number per step, as a
// training loop records its loss. Reading the number on the host every step
// (`norm.item<float>()`) makes the host wait for the GPU every step: nothing can be
// queued ahead. Writing it into a device array (`log[i] = norm`) and copying the whole
// log once at the end keeps the GPU fed. Both give the same numbers, which are checked
// against the same iteration in float64 on the CPU.
#include <kiln/kiln.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

using namespace kiln;

namespace {

constexpr int kSteps = 1000;
constexpr int64_t kSize = 100;

std::vector<float> copy_every_step(const Array& a, const Array& x0) {
  std::vector<float> log;
  Array x = x0;
  for (int i = 0; i < kSteps; ++i) {
    Array y = matmul(a, x);
    Array norm = linalg::norm(y);
    log.push_back(norm.item<float>());  // synchronises and copies 4 bytes: the GPU idles meanwhile
    x = y / norm;
  }
  return log;
}

std::vector<float> on_device(const Array& a, const Array& x0) {
  Array log = empty({kSteps}, float32, a.device());
  Array x = x0;
  for (int i = 0; i < kSteps; ++i) {
    Array y = matmul(a, x);
    Array norm = linalg::norm(y);
    log.index({i}).assign(norm);  // a device-side copy: queued, no wait
    x = y / norm;
  }
  return log.to_vector<float>();  // one synchronisation and one copy for all 1000 values
}

template <class F>
double seconds(Device d, F&& fn) {
  synchronize(d);
  auto t0 = std::chrono::steady_clock::now();
  fn();
  synchronize(d);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  const Device d = try_gpu();
  if (d.is_cpu()) std::printf("no GPU: running on the CPU, where reading a value costs no transfer\n");
  random::seed(3);
  Array m = random::normal({kSize, kSize}, 0.0, 0.1, float32, cpu());
  Array a_host = (m + m.T()) * 0.5f;  // symmetric: real eigenvalues, so the norms converge
  Array x_host = random::normal({kSize, kSize}, float32, cpu());
  Array a = a_host.to(d), x0 = x_host.to(d);

  if (d.is_cuda()) {  // warm-up: kernels compiled and cached, memory pooled (nothing to warm on the CPU)
    (void)copy_every_step(a, x0);
    (void)on_device(a, x0);
  }
  std::vector<float> host_log, device_log;
  double host_s = seconds(d, [&] { host_log = copy_every_step(a, x0); });
  double device_s = seconds(d, [&] { device_log = on_device(a, x0); });
  std::printf("%d steps on %s: copy every step %.1f ms, log on the device %.1f ms (%.1fx)\n", kSteps,
              d.str().c_str(), host_s * 1e3, device_s * 1e3, host_s / device_s);

  // The same iteration in float64 on the CPU, as the reference.
  std::vector<double> reference;
  {
    Array a64 = a_host.astype(float64), x = x_host.astype(float64);
    for (int i = 0; i < kSteps; ++i) {
      Array y = matmul(a64, x);
      Array norm = linalg::norm(y);
      reference.push_back(norm.item<double>());
      x = y / norm;
    }
  }
  int failures = 0;
  double worst_pair = 0, worst_ref = 0;
  bool identical = true;
  for (int i = 0; i < kSteps; ++i) {
    identical = identical && host_log[i] == device_log[i];
    worst_pair = std::max(worst_pair, std::abs(double(host_log[i]) - device_log[i]) / std::abs(reference[i]));
    worst_ref = std::max(worst_ref, std::abs(device_log[i] - reference[i]) / std::abs(reference[i]));
  }
  std::printf("norms: first %.6f, last %.6f; the two logs are %s (largest relative difference %.1e);\n"
              "largest relative difference from the float64 CPU iteration %.1e\n",
              device_log.front(), device_log.back(), identical ? "bit-identical" : "not bit-identical", worst_pair,
              worst_ref);
  // Same device ops in the same order: equal up to the order of the GPU's reduction (bitwise in practice).
  if (!(worst_pair <= 1e-6)) {
    std::fprintf(stderr, "CHECK FAILED: the two logs differ by %g\n", worst_pair);
    ++failures;
  }
  if (!(worst_ref <= 1e-3)) {
    std::fprintf(stderr, "CHECK FAILED: the logs differ from the float64 reference by %g\n", worst_ref);
    ++failures;
  }
  return failures ? 1 : 0;
}
