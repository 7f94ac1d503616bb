// The one place that knows which backends this build contains.
#include "core/backend.hpp"

namespace kiln::detail {
Backend& cpu_backend();
#ifdef KILN_WITH_CUDA
Backend& cuda_backend();
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
}  // namespace kiln::detail
