// RawModule / RawKernel on CUDA (internal): modules come from load_module (memory
// cache -> disk cache -> NVRTC) or load_module_image; kernels are launched through
// launch.hpp after their arguments are checked against the parameter layout the
// driver reports (cudaFuncGetParamInfo, CUDA >= 12.4) and packed into one buffer.
// The packing and the grid/block checks are plain functions, tested without a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/raw_kernel_backend.hpp"
#include "kiln/raw_module.hpp"

namespace kiln::cuda_impl {

/// Most bytes of kernel parameters a launch may pass (CUDA 12.1+ on compute capability >= 7.0).
inline constexpr size_t kMaxKernelParamBytes = 32764;

/// One kernel parameter in the device-side parameter layout.
struct KernelParam {
  size_t offset = 0;
  size_t size = 0;
};

/// A launch's arguments laid out like the kernel's parameters.
struct PackedArgs {
  std::vector<unsigned char> buffer;  ///< every argument's bytes at its offset (array arguments: device pointers)
  std::vector<size_t> offsets;        ///< offset of each argument in buffer
  std::vector<void*> pointers;        ///< address of each argument in buffer (cudaLaunchKernel's `args`)
  std::vector<const Array*> arrays;   ///< the array arguments, to mark as used by the launch's stream
};

/// Packs `count` arguments of kernel `name` (running on GPU `device`). With the kernel's `params` (from the
/// driver) it checks the argument count and each argument's size and uses the driver's offsets; without them
/// (nullptr) it lays the arguments out with their natural alignment, as a C struct. Array arguments pass their
/// data pointer and must be defined and on cuda:`device`. Throws ValueError (count, size, empty array, more
/// than kMaxKernelParamBytes) or DeviceError (an array elsewhere), naming the kernel and argument index.
PackedArgs pack_kernel_args(const std::string& name, const detail::RawLaunchArg* args, size_t count,
                            const std::vector<KernelParam>* params, int device);

/// Grid and block of a launch as dim3, after checking that each dimension is 1 .. 2^32-1 and then the
/// limits of validate_launch_config; throws ValueError naming the kernel and configuration.
std::pair<dim3, dim3> launch_dims(const std::string& name, const Dim3& grid, const Dim3& block, size_t shared_mem);

/// The parameters of `kernel` as the driver reports them; nullopt when it cannot tell (driver before 12.4).
std::optional<std::vector<KernelParam>> kernel_params(cudaKernel_t kernel);

/// The CUDA backend's compiler and launcher of user modules (CudaBackend::raw_kernels()).
detail::RawKernelBackend& raw_kernel_backend();

}  // namespace kiln::cuda_impl
