// Backend lookup and array allocation (through the device's runtime).
#include "core/backend.hpp"

#include <string>

#include "core/device_runtime.hpp"
#include "core/step_trace.hpp"
#include "core/user_kernel.hpp"
#include "kiln/version.hpp"

namespace kiln::detail {

Backend& backend_for(Device device) {
  Backend* b = builtin_backend(device.type);
  if (!b)
    throw DeviceError("no backend for device " + device.str() + ": this build has no CUDA backend (" + build_info() +
                      "); rebuild with the cuda preset or use cpu()");
  return traced_backend(*b);
}

void Backend::user_elementwise(const UserElementwiseCall& call) {
  throw DeviceError(call.kernel->name + ": user kernels run on CUDA devices, not on " + call.device.str() +
                    "; move the data with .to(gpu(0))");
}

void Backend::user_reduction(const UserReductionCall& call) {
  throw DeviceError(call.kernel->name + ": user kernels run on CUDA devices, not on " + call.device.str() +
                    "; move the data with .to(gpu(0))");
}

bool Backend::fft(const FftCall& call) {
  throw DeviceError("fft: device " + call.out.device().str() +
                    " has no FFT engine in this build; move the array with .to(kiln::cpu())");
}

Array make_array(const Shape& shape, DType dtype, Device device, const ArrayOptions& options) {
  int64_t n = 1;
  for (int64_t e : shape) {
    if (e < 0)
      throw ValueError("empty: negative dimension in shape " + shape_str(shape) + "; extents must be >= 0");
    n *= e;
  }
  if (options.pinned && !device.is_cpu())
    throw DeviceError("empty: pinned memory is host memory, but device " + device.str() +
                      " was asked for; pass cpu() with {.pinned = true}");
  // Pinned host memory comes from the CUDA runtime's pinned pool: the CPU runtime knows no CUDA.
  DeviceRuntime* owner = options.pinned ? builtin_runtime(DeviceType::CUDA) : &runtime_for(device);
  if (!owner)
    throw DeviceError("empty: pinned host memory needs the CUDA backend, which this build lacks (" + build_info() +
                      "); drop {.pinned = true} or rebuild with the cuda preset");
  // While a step is traced for kiln::compile, from the trace's pool (core/step_trace.hpp).
  std::shared_ptr<Storage> storage = traced_allocate(*owner, n * itemsize(dtype), device, options);
  if (!storage) storage = owner->allocate(n * itemsize(dtype), device, options);
  note_allocation(storage);
  return Array(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

}  // namespace kiln::detail
