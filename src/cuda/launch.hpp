// Checked kernel launches for run-time compiled kernels (internal): the
// configuration is validated before CUDA sees it, dynamic shared memory above
// 48 KB is requested through the kernel's attribute, and a failed launch throws
// CudaError naming the kernel and its configuration.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

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

}  // namespace kiln::cuda_impl
