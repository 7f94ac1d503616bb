// Deferred device checks (core/device_check.hpp) on a GPU: a grid-stride kernel compares each value with
// [lo, hi) and, at the first failure it sees, stores the value and the message code in an error word of
// mapped pinned host memory (one per GPU). Each synchronisation with the GPU reads the word (a host load: no
// CUDA call) and throws the recorded error, clearing the word.
#include "core/device_check.hpp"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "cuda/codegen.hpp"
#include "cuda/elementwise_layout.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"

namespace kiln::cuda_impl {
namespace {

/// The error word: the kernel writes value, fences, then code; the host reads code first.
struct ErrorWord {
  int32_t code;
  int32_t pad;
  int64_t value;
};

constexpr const char* kCheckSource = R"(
struct ErrorWord { int code; int pad; long long value; };
extern "C" __global__ void kiln_check_range(const long long* v, long long n, long long lo, long long hi, int code,
                                            ErrorWord* word) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long x = v[i];
    if (x < lo || x >= hi) {
      volatile ErrorWord* w = word;
      if (w->code == 0) {  // keep the first error; racing threads of one kernel store values of the same check
        w->value = x;
        __threadfence_system();
        w->code = code;
      }
      return;
    }
  }
}
)";

struct DeviceChecks {
  std::once_flag once;
  std::atomic<ErrorWord*> host{nullptr};  // mapped pinned memory; read by every synchronisation, on any thread
  ErrorWord* device = nullptr;            // its device address
  KernelTable::Entry kernel;
};

std::array<DeviceChecks, kMaxDevices>& checks() {
  static auto* all = new std::array<DeviceChecks, kMaxDevices>;  // leaked: read during static destruction
  return *all;
}

DeviceChecks& ready(int device) {
  DeviceChecks& c = checks().at(static_cast<size_t>(device));
  std::call_once(c.once, [&] {
    RelaxedCaptureMode relaxed;  // the first check may come inside a capture
    void* p = nullptr;
    KILN_CUDA_CHECK(cudaHostAlloc(&p, sizeof(ErrorWord), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<ErrorWord*>(p) = ErrorWord{};
    void* d = nullptr;
    KILN_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    c.device = static_cast<ErrorWord*>(d);
    c.kernel = compile_kernel_entry(device, kCheckSource, "kiln_check_range");
    c.host.store(static_cast<ErrorWord*>(p), std::memory_order_release);  // last: the word is ready
  });  // a throw leaves the flag unset: the next check tries again
  return c;
}

}  // namespace

bool cuda_check_range(const Array& values, int64_t lo, int64_t hi, int32_t code) {
  const int device = values.device().index;
  if (device < 0 || device >= kMaxDevices) return false;
  set_device(device);
  DeviceChecks& c = ready(device);
  const auto* ptr = static_cast<const long long*>(values.data_ptr());
  long long n = values.size(), l = lo, h = hi;
  int32_t k = code;
  ErrorWord* word = c.device;
  void* args[] = {&ptr, &n, &l, &h, &k, &word};
  launch_entry(c.kernel, dim3(grid_for(device, n, c.kernel)), dim3(kBlockSize), current_stream(device), args);
  return true;
}

void raise_device_errors(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  ErrorWord* w = checks()[static_cast<size_t>(device)].host.load(std::memory_order_acquire);
  if (!w) return;
  const int32_t code = *static_cast<volatile int32_t*>(&w->code);
  if (code == 0) return;
  const int64_t value = *static_cast<volatile int64_t*>(&w->value);
  *static_cast<volatile int64_t*>(&w->value) = 0;
  *static_cast<volatile int32_t*>(&w->code) = 0;
  detail::throw_deferred_check(code, value, gpu(device));
}

}  // namespace kiln::cuda_impl
