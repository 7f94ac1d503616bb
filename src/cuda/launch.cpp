// Checked kernel launches (see launch.hpp).
#include "cuda/launch.hpp"

#include <cuda.h>

#include <climits>
#include <cstdio>

#include "core/sync_debug.hpp"
#include "cuda/runtime.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {
namespace {

// Limits of every GPU kiln supports (compute capability >= 7.5).
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockX = 1024, kMaxBlockY = 1024, kMaxBlockZ = 64;
constexpr unsigned kMaxGridX = 2147483647u, kMaxGridY = 65535, kMaxGridZ = 65535;

std::string dims_str(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

using CuLaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**);
using CuKernelGetFunction = CUresult (*)(CUfunction*, CUkernel);
using CuGetErrorName = CUresult (*)(CUresult, const char**);

// Driver entry points, looked up once (null when the driver lacks them: callers fall back to the runtime).
struct DriverCalls {
  CuLaunchKernel launch_kernel = nullptr;
  CuKernelGetFunction kernel_get_function = nullptr;
  CuGetErrorName get_error_name = nullptr;
};

template <class F>
F driver_entry_point(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(fn);
}

const DriverCalls& driver_calls() {
  static const DriverCalls calls = [] {
    DriverCalls c;
    c.launch_kernel = driver_entry_point<CuLaunchKernel>("cuLaunchKernel");
    c.kernel_get_function = driver_entry_point<CuKernelGetFunction>("cuKernelGetFunction");
    c.get_error_name = driver_entry_point<CuGetErrorName>("cuGetErrorName");
    if (!c.launch_kernel || !c.kernel_get_function || !c.get_error_name) c = DriverCalls{};
    return c;
  }();
  return calls;
}

}  // namespace

std::string launch_config_str(const char* name, dim3 grid, dim3 block, size_t shared_mem, cudaStream_t stream) {
  char stream_text[32];
  std::snprintf(stream_text, sizeof stream_text, "%p", static_cast<void*>(stream));
  return "kernel '" + std::string(name ? name : "?") + "' (grid " + dims_str(grid) + ", block " + dims_str(block) +
         ", " + std::to_string(shared_mem) + " bytes of dynamic shared memory, stream " +
         (stream == nullptr ? std::string("default") : std::string(stream_text)) + ")";
}

void validate_launch_config(const char* name, dim3 grid, dim3 block, size_t shared_mem) {
  const auto fail = [&](const std::string& why) {
    throw ValueError("kiln: cannot launch " + launch_config_str(name, grid, block, shared_mem, nullptr) + ": " + why);
  };
  if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
    fail("every grid and block dimension must be at least 1 (skip the launch when there is no work)");
  if (block.x > kMaxBlockX || block.y > kMaxBlockY || block.z > kMaxBlockZ)
    fail("block dimensions are limited to (1024,1024,64)");
  if (static_cast<unsigned long long>(block.x) * block.y * block.z > kMaxThreadsPerBlock)
    fail("a block has at most 1024 threads; use smaller blocks and more of them");
  if (grid.x > kMaxGridX || grid.y > kMaxGridY || grid.z > kMaxGridZ)
    fail(
        "grid dimensions are limited to (2147483647,65535,65535); put the large dimension in x or loop in the "
        "kernel");
  if (shared_mem > static_cast<size_t>(INT_MAX)) fail("dynamic shared memory is far beyond any GPU's limit");
}

void launch(cudaKernel_t kernel, dim3 grid, dim3 block, size_t shared_mem, cudaStream_t stream, void** args,
            const char* name) {
  if (kernel == nullptr)
    throw ValueError("kiln: cannot launch " + launch_config_str(name, grid, block, shared_mem, stream) +
                     ": the kernel handle is null (load it with Module::function first)");
  validate_launch_config(name, grid, block, shared_mem);
  launch_validated(kernel, grid, block, shared_mem, stream, args, name);
}

void launch_validated(cudaKernel_t kernel, dim3 grid, dim3 block, size_t shared_mem, cudaStream_t stream, void** args,
                      const char* name) {
  const auto* function = reinterpret_cast<const void*>(kernel);
  const auto fail = [&](const char* call, cudaError_t err) {
    cudaGetLastError();  // clear the non-sticky error state so the next call does not report it again
    int device = -1;
    cudaGetDevice(&device);
    throw CudaError("kiln: " + std::string(call) + " failed for " +
                    launch_config_str(name, grid, block, shared_mem, stream) + " on cuda:" + std::to_string(device) +
                    ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  };
  if (shared_mem > kDefaultDynamicSharedMemory) {
    // Above 48 KB a kernel must opt in; the attribute applies to the current device. Failing here means the
    // request exceeds the device's cudaDevAttrMaxSharedMemoryPerBlockOptin (227 KB on compute capability 9.0).
    RelaxedCaptureMode relaxed;  // allowed during a graph capture: it is no stream work
    const cudaError_t err =
        cudaFuncSetAttribute(function, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_mem));
    if (err != cudaSuccess) fail("cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", err);
  }
  // cudaLaunchKernel reports configuration and resource errors of this launch itself; cudaGetLastError is only
  // called on failure (to clear the error), so an earlier unrelated error is never blamed on this kernel.
  detail::note_gpu_work(current_device());  // for kiln::bench's default device set
  const cudaError_t err = cudaLaunchKernel(function, grid, block, args, shared_mem, stream);
  if (err != cudaSuccess) fail("cudaLaunchKernel", err);
}

void* context_function(cudaKernel_t kernel) {
  const DriverCalls& calls = driver_calls();
  if (kernel == nullptr || calls.kernel_get_function == nullptr) return nullptr;
  CUfunction function = nullptr;
  if (calls.kernel_get_function(&function, reinterpret_cast<CUkernel>(kernel)) != CUDA_SUCCESS) return nullptr;
  return reinterpret_cast<void*>(function);
}

void launch_function(void* function, dim3 grid, dim3 block, cudaStream_t stream, void** args, const char* name) {
  constexpr size_t shared_mem = 0;  // for the messages
  const DriverCalls& calls = driver_calls();
  if (function == nullptr || calls.launch_kernel == nullptr)
    throw ValueError("kiln: cannot launch " + launch_config_str(name, grid, block, shared_mem, stream) +
                     ": no context function (internal: use launch() with the library kernel)");
  validate_launch_config(name, grid, block, shared_mem);
  detail::note_gpu_work(current_device());  // for kiln::bench's default device set
  const CUresult result =
      calls.launch_kernel(reinterpret_cast<CUfunction>(function), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                          static_cast<unsigned>(shared_mem), reinterpret_cast<CUstream>(stream), args, nullptr);
  if (result != CUDA_SUCCESS) {
    const char* error_name = nullptr;
    if (calls.get_error_name(result, &error_name) != CUDA_SUCCESS || error_name == nullptr) error_name = "?";
    int device = -1;
    cudaGetDevice(&device);
    throw CudaError("kiln: cuLaunchKernel failed for " + launch_config_str(name, grid, block, shared_mem, stream) +
                    " on cuda:" + std::to_string(device) + ": " + error_name + " (" + std::to_string(result) + ")");
  }
}

void launch_entry(const KernelTable::Entry& kernel, dim3 grid, dim3 block, cudaStream_t stream, void** args) {
  if (kernel.context_function != nullptr)
    launch_function(kernel.context_function, grid, block, stream, args, kernel.name.c_str());
  else
    launch(static_cast<cudaKernel_t>(kernel.function), grid, block, 0, stream, args, kernel.name.c_str());
}

}  // namespace kiln::cuda_impl
