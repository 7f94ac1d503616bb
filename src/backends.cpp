// The one place that knows which backends this build contains: each device type's ops (Backend) and
// runtime (DeviceRuntime), and the GPU's activity tracer of kiln::profiler.
#include "core/backend.hpp"
#include "core/device_runtime.hpp"
#include "core/profiler_tracer.hpp"

namespace kiln::detail {
Backend& cpu_backend();
DeviceRuntime& cpu_runtime();
#ifdef KILN_WITH_CUDA
Backend& cuda_backend();
DeviceRuntime& cuda_runtime();
ActivityTracer& cuda_activity_tracer();
#endif

Backend* builtin_backend(DeviceType type) {
  switch (type) {
    case DeviceType::CPU: return &cpu_backend();
    case DeviceType::CUDA:
#ifdef KILN_WITH_CUDA
      return &cuda_backend();
#else
      return nullptr;
#endif
  }
  return nullptr;
}

DeviceRuntime* builtin_runtime(DeviceType type) {
  switch (type) {
    case DeviceType::CPU: return &cpu_runtime();
    case DeviceType::CUDA:
#ifdef KILN_WITH_CUDA
      return &cuda_runtime();
#else
      return nullptr;
#endif
  }
  return nullptr;
}
ActivityTracer* builtin_activity_tracer() {
#ifdef KILN_WITH_CUDA
  return &cuda_activity_tracer();
#else
  return nullptr;
#endif
}
}  // namespace kiln::detail
