// Runtime lookup by device type (the runtimes themselves live in the backends' folders).
#include "core/device_runtime.hpp"

#include "kiln/error.hpp"
#include "kiln/version.hpp"

namespace kiln::detail {

DeviceRuntime& runtime_for(Device device) {
  DeviceRuntime* r = builtin_runtime(device.type);
  if (!r)
    throw DeviceError("no backend for device " + device.str() + ": this build has no CUDA backend (" + build_info() +
                      "); rebuild with the cuda preset or use cpu()");
  return *r;
}

}  // namespace kiln::detail
