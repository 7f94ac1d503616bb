// Checked kernel launches for run-time compiled kernels (internal): the
// configuration is validated before CUDA sees it, dynamic shared memory above
// 48 KB is requested through the kernel's attribute, and a failed launch throws
// CudaError naming the kernel and its configuration.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "cuda/codegen.hpp"

namespace kiln::cuda_impl {

/// Dynamic shared memory a kernel may use without opting in through cudaFuncAttributeMaxDynamicSharedMemorySize.
inline constexpr size_t kDefaultDynamicSharedMemory = 48 * 1024;

/// "kernel 'name' (grid (x,y,z), block (x,y,z), N bytes of dynamic shared memory, stream 0x...)" for messages.
std::string launch_config_str(const char* name, dim3 grid, dim3 block, size_t shared_mem, cudaStream_t stream);

/// Checks that block has 1..1024 threads (x, y <= 1024, z <= 64), grid is non-empty within
/// (2^31-1, 65535, 65535) and shared_mem fits an int; throws ValueError naming the kernel and configuration.
void validate_launch_config(const char* name, dim3 grid, dim3 block, size_t shared_mem);

/// Launches `kernel` on the current device with `args` (pointers to each argument), after validating the
/// configuration; requests more than 48 KB of dynamic shared memory from the kernel's attribute when asked for.
/// Throws ValueError (bad configuration or null kernel) or CudaError naming the kernel and configuration.
/// Asynchronous: errors raised while the kernel runs appear at the next synchronisation.
void launch(cudaKernel_t kernel, dim3 grid, dim3 block, size_t shared_mem, cudaStream_t stream, void** args,
            const char* name);

/// launch() without its own checks, for a non-null kernel whose configuration validate_launch_config has
/// already accepted (RawKernel's launch_dims does it). Throws CudaError like launch().
void launch_validated(cudaKernel_t kernel, dim3 grid, dim3 block, size_t shared_mem, cudaStream_t stream,
                      void** args, const char* name);

/// The CUfunction of library kernel `kernel` in the current device's primary context (cuKernelGetFunction,
/// reached through cudaGetDriverEntryPointByVersion: kiln does not link libcuda), for launch_function; nullptr
/// when the driver does not provide it. Valid while the kernel's library stays loaded.
void* context_function(cudaKernel_t kernel);

/// Launches a function from context_function through cuLaunchKernel, on the current device, after the same
/// validation as launch(): about 0.3 us of host time cheaper per launch than cudaLaunchKernel on a library
/// kernel (bench/bench_launch.cpp). No dynamic shared memory (use launch()). Throws like launch().
void launch_function(void* function, dim3 grid, dim3 block, cudaStream_t stream, void** args, const char* name);

/// Launches a kernel entry (built-in, fused or user kernel, from compile_kernel_entry) on the current device:
/// through its context function (cuLaunchKernel) when it has one, else through launch(). No dynamic shared
/// memory. Throws like launch(), naming kernel.name.
void launch_entry(const KernelTable::Entry& kernel, dim3 grid, dim3 block, cudaStream_t stream, void** args);

}  // namespace kiln::cuda_impl
