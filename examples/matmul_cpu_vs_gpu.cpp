// Walkthrough 2: the same float32 matmul on the CPU and on the GPU, timed right.
//
//   build/cuda/examples/example_matmul_cpu_vs_gpu [N_CPU [N_GPU]]   (defaults 2048 and 4096)
//
// Timing rules shown here, all applied by kiln::bench: warm up first (the first GPU call
// loads cuBLAS and picks a kernel; the first CPU calls start the thread pool), take the
// median of many runs, and time GPU work with events recorded in the stream (a host
// clock read right after a launch only measures the launch). Both results are checked against a float64 product.
// N_CPU is 2048 so that every thread has milliseconds of work: at 512^2 a 16-thread product takes a
// fraction of a millisecond and its time is dominated by waking the threads (one run measured 0.49 ms,
// the next 4 ms). The min and max of the runs are printed beside the median to show the spread.
// Try `example_matmul_cpu_vs_gpu 2048 15360` on a GPU machine for the walkthrough's sizes (the
// walkthrough compares with one CPU core: the one-core rate is measured too).
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#ifdef _OPENMP
#include <omp.h>  // kiln's CPU kernels and OpenBLAS take their thread count from OpenMP
#endif

using namespace kiln;

namespace {

// Largest |got - want| over the scale of the product, against a float64 product on the CPU.
double relative_error(const Array& got, const Array& a, const Array& b) {
  Array want = matmul(a.to(cpu()).astype(float64), b.to(cpu()).astype(float64));
  Array diff = abs(got.to(cpu()).astype(float64) - want);
  double scale = max(abs(want)).item<double>();
  return max(diff).item<double>() / scale;
}

// "  12.345 ms median (min 12.001, max 13.020; 20 runs)" of a bench result.
std::string timing(const BenchResult& r, const Stats& s) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%10.3f ms median (min %.3f, max %.3f; %d runs)", s.median * 1e3, s.min * 1e3,
                s.max * 1e3, r.repeats());
  return buf;
}

int64_t arg_or(int argc, char** argv, int i, int64_t fallback) {
  return argc > i ? std::strtoll(argv[i], nullptr, 10) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n_cpu = arg_or(argc, argv, 1, 2048);
  const int64_t n_gpu = arg_or(argc, argv, 2, 4096);
  if (n_cpu <= 0 || n_gpu <= 0) {
    std::fprintf(stderr, "usage: example_matmul_cpu_vs_gpu [N_CPU [N_GPU]] (positive sizes)\n");
    return 2;
  }
  int failures = 0;
  random::seed(42);

  // CPU: OpenBLAS on every thread OpenMP gives kiln, then on one core.
  Array a = random::normal({n_cpu, n_cpu}, float32, cpu());
  Array b = random::normal({n_cpu, n_cpu}, float32, cpu());
  Array c;
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  const double flop = 2.0 * n_cpu * n_cpu * n_cpu;
  std::printf(
      "Compared: one float32 %lld^2 x %lld^2 product, the same inputs on each side: OpenBLAS on %d CPU "
      "thread(s), then on one core, and cuBLAS on the GPU. Times are medians after warm-up runs: host clock "
      "on the CPU, CUDA events on the GPU.\n",
      static_cast<long long>(n_cpu), static_cast<long long>(n_cpu), threads);
  const BenchResult cpu_run = bench([&] { c = matmul(a, b); }, {.warmup = 3, .repeat = 20, .max_seconds = 5});
  const double cpu_s = cpu_run.seconds();  // host clock median
  double err = relative_error(c, a, b);
  std::printf("cpu     %5lld^2 float32 matmul: %s  %7.3f TFLOP/s  (%d threads, max error %.1e)\n",
              static_cast<long long>(n_cpu), timing(cpu_run, cpu_run.host()).c_str(), flop / cpu_s / 1e12, threads,
              err);
  double one_core_s = cpu_s;
#ifdef _OPENMP
  if (threads > 1) {
    omp_set_num_threads(1);
    const BenchResult one = bench([&] { (void)matmul(a, b); }, {.warmup = 1, .repeat = 5, .max_seconds = 5});
    one_core_s = one.seconds();
    omp_set_num_threads(threads);
    std::printf("cpu     %5lld^2 float32 matmul: %s  %7.3f TFLOP/s  (one core; the %d threads are %.1fx faster)\n",
                static_cast<long long>(n_cpu), timing(one, one.host()).c_str(), flop / one_core_s / 1e12, threads,
                one_core_s / cpu_s);
  }
#endif
  if (!(err < 1e-5)) {
    std::fprintf(stderr, "CHECK FAILED: CPU matmul differs from the float64 product by %g\n", err);
    ++failures;
  }

  if (num_gpus() == 0) {
    std::printf("no GPU: skipping the GPU half (run this on a machine with an NVIDIA GPU and a CUDA build)\n");
    return failures ? 1 : 0;
  }
  const Device d = gpu(0);
  std::printf("gpu: %s\n", device_properties(d).name.c_str());
  // The same inputs on the GPU first, so both sides multiply the same numbers.
  Array ga = a.to(d), gb = b.to(d);
  Array gc;
  const BenchResult gpu_run = bench([&] { gc = matmul(ga, gb); }, {.warmup = 3, .repeat = 20});
  const double gpu_same_s = gpu_run.seconds();  // event median
  err = relative_error(gc, a, b);
  std::printf(
      "cuda:0  %5lld^2 float32 matmul: %s  %7.3f TFLOP/s  (max error %.1e)\n"
      "        -> %.0fx the CPU's %d threads, %.0fx one core\n",
      static_cast<long long>(n_cpu), timing(gpu_run, gpu_run.device(d)).c_str(), flop / gpu_same_s / 1e12, err,
      cpu_s / gpu_same_s, threads, one_core_s / gpu_same_s);
  // float32 products accumulate differently in cuBLAS and OpenBLAS (TF32 is off by default).
  if (!(err < 1e-5)) {
    std::fprintf(stderr, "CHECK FAILED: GPU matmul differs from the float64 product by %g\n", err);
    ++failures;
  }

  // A size where the GPU is busy long enough to reach its peak rate.
  if (n_gpu != n_cpu) {
    Array x = random::normal({n_gpu, n_gpu}, float32, d), y = random::normal({n_gpu, n_gpu}, float32, d);
    Array z;
    double big_s = bench([&] { z = matmul(x, y); }, {.warmup = 3, .repeat = 10}).seconds();
    double big_tflops = 2.0 * n_gpu * n_gpu * n_gpu / big_s / 1e12;
    const double one_core_tflops = flop / one_core_s / 1e12;
    std::printf(
        "cuda:0  %5lld^2 float32 matmul: %10.3f ms  %7.3f TFLOP/s; one core at its %lld^2 rate would need"
        " %.1f s (%.0fx)\n",
        static_cast<long long>(n_gpu), big_s * 1e3, big_tflops, static_cast<long long>(n_cpu),
        2.0 * n_gpu * n_gpu * n_gpu / (one_core_tflops * 1e12), big_tflops / one_core_tflops);
    // Spot-check one row of the big product against float64 on the CPU.
    Array row = z.index({Slice(0, 1)});
    double row_err = relative_error(row, x.index({Slice(0, 1)}), y);
    if (!(row_err < 1e-4)) {  // long float32 sums: looser than the small case
      std::fprintf(stderr, "CHECK FAILED: first row of the %lld^2 product is off by %g\n",
                   static_cast<long long>(n_gpu), row_err);
      ++failures;
    }
  }
  return failures ? 1 : 0;
}
