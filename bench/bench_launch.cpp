// The host cost of one kernel launch through each CUDA launch path, on the machine at hand: the floor
// under kiln's small-op overhead. An empty kernel and a 1000-element float add are compiled with NVRTC
// (kiln's compiler), loaded as a cudaLibrary, and launched 10000 times in a row per path; the figure is
// host wall time per launch including one final synchronisation (as bench/peers/torch_bench.py measures
// PyTorch), and the host time to issue the launches alone.
//   bench_launch [--json FILE]
#include <cuda.h>
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "cuda/compiler.hpp"
#include "cuda/runtime.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;
using kiln::benchutil::Report;
using kiln::benchutil::Result;

namespace {

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using KernelGetFunctionFn = CUresult (*)(CUfunction*, CUkernel);

void* driver_symbol(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  KILN_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || fn == nullptr) throw Error(std::string("no driver symbol ") + name);
  return fn;
}

struct Timing {
  kiln::benchutil::Timing wall;  // seconds per launch, including the final synchronisation
  double issue_us;               // per launch, host time of the launch calls alone (median)
};

template <class Launch>
Timing time_launches(Launch&& launch, cudaStream_t stream) {
  constexpr int kLaunches = 10000;
  for (int i = 0; i < 200; ++i) launch();
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> wall, issue;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kLaunches; ++i) launch();
    auto t1 = std::chrono::steady_clock::now();
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    auto t2 = std::chrono::steady_clock::now();
    issue.push_back(std::chrono::duration<double>(t1 - t0).count());
    wall.push_back(std::chrono::duration<double>(t2 - t0).count());
  }
  return {kiln::benchutil::per_call(kiln::summarize(wall), kLaunches), kiln::summarize(issue).median / kLaunches * 1e6};
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
  if (num_gpus() == 0) {
    fmt::print("bench_launch: no GPU (num_gpus() == 0): nothing to measure\n");
    return 0;
  }
  const std::string source =
      "extern \"C\" __global__ void empty_kernel() {}\n"
      "extern \"C\" __global__ void add_kernel(float* out, const float* a, const float* b, int n) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a[i] + b[i]; }\n";
  cuda_impl::set_device(0);
  auto module = cuda_impl::load_module(source, "bench_launch", 0);
  cudaKernel_t empty = module->function("empty_kernel");
  cudaKernel_t add = module->function("add_kernel");
  auto cu_launch = reinterpret_cast<LaunchFn>(driver_symbol("cuLaunchKernel"));
  auto cu_get_function = reinterpret_cast<KernelGetFunctionFn>(driver_symbol("cuKernelGetFunction"));
  CUfunction empty_fn = nullptr, add_fn = nullptr;
  if (cu_get_function(&empty_fn, reinterpret_cast<CUkernel>(empty)) != CUDA_SUCCESS ||
      cu_get_function(&add_fn, reinterpret_cast<CUkernel>(add)) != CUDA_SUCCESS)
    throw Error("cuKernelGetFunction failed");

  cudaStream_t nonblocking = nullptr;
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  float *out = nullptr, *a = nullptr, *b = nullptr;
  KILN_CUDA_CHECK(cudaMalloc(&out, 4000));
  KILN_CUDA_CHECK(cudaMalloc(&a, 4000));
  KILN_CUDA_CHECK(cudaMalloc(&b, 4000));
  int n = 1000;
  void* add_args[] = {&out, &a, &b, &n};

  Report report("gpu", "kiln", device_properties(gpu(0)).name);
  fmt::print("{:<44} {:>12} {:>12}\n", "launch path", "wall us/op", "issue us/op");
  auto row = [&](const std::string& name, Timing t) {
    const double wall_us = t.wall.median * 1e6;
    fmt::print("{:<44} {:>12.3f} {:>12.3f}\n", name, wall_us, t.issue_us);
    report.add(Result{name, "10000", "float32", t.wall, wall_us, "us/op", "ok"});
  };
  const dim3 one(1), warp(32), block(256), grid4(4);
  row("cudaLaunchKernel library kernel, legacy stream", time_launches([&] {
        (void)cudaLaunchKernel(reinterpret_cast<const void*>(empty), one, warp, nullptr, 0, nullptr);
      }, nullptr));
  row("cudaLaunchKernel library kernel, non-blocking", time_launches([&] {
        (void)cudaLaunchKernel(reinterpret_cast<const void*>(empty), one, warp, nullptr, 0, nonblocking);
      }, nonblocking));
  row("cuLaunchKernel CUfunction, legacy stream", time_launches([&] {
        (void)cu_launch(empty_fn, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
      }, nullptr));
  row("cuLaunchKernel CUfunction, non-blocking", time_launches([&] {
        (void)cu_launch(empty_fn, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(nonblocking), nullptr, nullptr);
      }, nonblocking));
  row("cuLaunchKernel CUkernel, legacy stream", time_launches([&] {
        (void)cu_launch(reinterpret_cast<CUfunction>(empty), 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
      }, nullptr));
  row("add 1000: cudaLaunchKernel, legacy stream", time_launches([&] {
        (void)cudaLaunchKernel(reinterpret_cast<const void*>(add), grid4, block, add_args, 0, nullptr);
      }, nullptr));
  row("add 1000: cuLaunchKernel CUfunction, legacy", time_launches([&] {
        (void)cu_launch(add_fn, 4, 1, 1, 256, 1, 1, 0, nullptr, add_args, nullptr);
      }, nullptr));
  row("add 1000: cuLaunchKernel CUfunction, non-blocking", time_launches([&] {
        (void)cu_launch(add_fn, 4, 1, 1, 256, 1, 1, 0, reinterpret_cast<CUstream>(nonblocking), add_args, nullptr);
      }, nonblocking));
  KILN_CUDA_CHECK(cudaGetLastError());
  cudaFree(out);
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(nonblocking);
  if (!json.empty()) report.write_json(json);
  return 0;
}
