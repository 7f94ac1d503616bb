// CUDA runtime glue: checked-call errors, device discovery (0 GPUs when the
// driver is missing), the per-thread current CUDA device and current streams,
// a pool of internal events per device, and peer access between GPUs.
// Owners of global state here: the device count (computed once), the per-device
// event pools, the peer-access table and the registry of CUDA graph captures under
// way, each behind its own mutex or once-flag; everything else is thread_local.
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.hpp"
#include "cuda/compiler.hpp"
#include "cuda/runtime.hpp"
#include "kiln/device.hpp"

namespace kiln::cuda_impl {

namespace {

// Errors after which the CUDA context is unusable: every later call fails the same way.
bool is_sticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

// "src/cuda/backend.cpp" rather than the build machine's absolute path.
const char* short_path(const char* file) {
  const char* p = std::strstr(file, "src/");
  return p ? p : file;
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  if (!is_sticky(err)) (void)cudaGetLastError();  // clear a non-sticky error so later checks start clean
  std::string where = device >= 0 ? "cuda:" + std::to_string(device) : std::string("no current device");
  std::string msg = std::string(call) + " failed at " + short_path(file) + ":" + std::to_string(line) + " on " + where +
                    ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  if (is_sticky(err))
    msg += "; this error is sticky: the CUDA context of the process is unusable from now on (a kernel faulted). "
           "Run with compute-sanitizer or CUDA_LAUNCH_BLOCKING=1 to find the kernel, then restart the process";
  throw CudaError(msg);
}

int device_count() {
  // A function-local static is initialised once even with concurrent callers.
  static const int count = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // no driver / no GPU: 0 devices, never an error
      return 0;
    }
    if (n > 0) start_nvrtc_warmup();
    return n < 0 ? 0 : n;
  }();
  return count;
}

void check_device(int device, const char* op) {
  int n = device_count();
  if (device < 0 || device >= n)
    throw DeviceError(std::string(op) + ": cuda:" + std::to_string(device) + " does not exist; this machine has " +
                      std::to_string(n) + " usable GPU(s); use try_gpu() to fall back to the CPU");
  if (device >= kMaxDevices)
    throw DeviceError(std::string(op) + ": cuda:" + std::to_string(device) + " is beyond the " +
                      std::to_string(kMaxDevices) + " GPUs kiln supports per process; restrict CUDA_VISIBLE_DEVICES");
}

namespace {
// The CUDA device this thread last made current through set_device (-1: none yet). Code that calls
// cudaSetDevice directly must call set_device again (or cudaSetDevice back) before using kiln.
thread_local int t_cuda_device = -1;
thread_local std::array<cudaStream_t, kMaxDevices> t_current_streams{};
}  // namespace

int current_device() noexcept { return t_cuda_device; }

void set_device(int device) {
  if (device == t_cuda_device) return;
  KILN_CUDA_CHECK(cudaSetDevice(device));
  t_cuda_device = device;
}

cudaStream_t current_stream(int device) {
  return device >= 0 && device < kMaxDevices ? t_current_streams[static_cast<size_t>(device)] : nullptr;
}

void set_current_stream(int device, cudaStream_t stream) {
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError("set_current_stream: cuda:" + std::to_string(device) + " is out of range");
  t_current_streams[static_cast<size_t>(device)] = stream;
}

int compute_capability(int device) {
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  check_device(device, "compute_capability");
  int cc = cache[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (cc) return cc;
  int major = 0, minor = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  cc = major * 10 + minor;
  cache[static_cast<size_t>(device)].store(cc, std::memory_order_relaxed);
  return cc;
}

namespace {
struct EventPool {
  std::mutex mutex;
  std::vector<cudaEvent_t> free;
};
EventPool& event_pool(int device) {
  // Leaked on purpose: events may be released by destructors running after static destruction.
  static auto* pools = new std::array<EventPool, kMaxDevices>();
  return (*pools)[static_cast<size_t>(device)];
}
}  // namespace

cudaEvent_t acquire_event(int device) {
  EventPool& pool = event_pool(device);
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (!pool.free.empty()) {
      cudaEvent_t e = pool.free.back();
      pool.free.pop_back();
      return e;
    }
  }
  set_device(device);
  cudaEvent_t e = nullptr;
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void release_event(int device, cudaEvent_t event) noexcept {
  if (!event || device < 0 || device >= kMaxDevices) return;
  EventPool& pool = event_pool(device);
  try {
    std::lock_guard<std::mutex> lock(pool.mutex);
    pool.free.push_back(event);
  } catch (...) {
    // Out of memory for the free list: let the event go.
    (void)cudaEventDestroy(event);
  }
}

bool enable_peer_access(int device, int peer) {
  // 0 unknown, 1 enabled, 2 not possible; for each ordered pair.
  static std::mutex mutex;
  static std::vector<signed char> state;
  if (device == peer) return true;
  int n = device_count();
  std::lock_guard<std::mutex> lock(mutex);
  if (state.empty()) state.assign(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
  signed char& s = state[static_cast<size_t>(device) * static_cast<size_t>(n) + static_cast<size_t>(peer)];
  if (s == 0) {
    int can = 0;
    KILN_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
    if (can) {
      set_device(device);
      cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else if (err != cudaSuccess) {
        // Peer access is an optimisation: copies still work, staged by the driver.
        (void)cudaGetLastError();
        can = 0;
      }
    }
    s = can ? 1 : 2;
  }
  return s == 1;
}

}  // namespace kiln::cuda_impl

// ---------------------------------------------------------------------------------------------
// CUDA graph capture state (see runtime.hpp).

namespace kiln::cuda_impl {

namespace {
thread_local int t_captures = 0;

struct CaptureEntry {
  int device;
  cudaStream_t stream;
  std::thread::id thread;
  std::vector<std::shared_ptr<Storage>>* keep;
  detail::GraphRandom* random;
};
std::atomic<int> g_capture_count{0};
std::mutex& capture_mutex() {
  static auto* m = new std::mutex;  // leaked on purpose: graphs may be destroyed during static destruction
  return *m;
}
std::vector<CaptureEntry>& capture_entries() {
  static auto* entries = new std::vector<CaptureEntry>;
  return *entries;
}
}  // namespace

int thread_captures() { return t_captures; }
ThreadCaptureScope::ThreadCaptureScope() { ++t_captures; }
ThreadCaptureScope::~ThreadCaptureScope() {
  if (t_captures > 0) --t_captures;
}

RelaxedCaptureMode::RelaxedCaptureMode() {
  if (t_captures == 0) return;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess) {
    active_ = true;
    previous_ = mode;
  } else {
    (void)cudaGetLastError();
  }
}
RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (!active_) return;
  cudaStreamCaptureMode mode = previous_;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) (void)cudaGetLastError();
}

void register_capture(int device, cudaStream_t stream, std::vector<std::shared_ptr<Storage>>* keep,
                      detail::GraphRandom* random) {
  std::lock_guard<std::mutex> lock(capture_mutex());
  capture_entries().push_back({device, stream, std::this_thread::get_id(), keep, random});
  g_capture_count.fetch_add(1, std::memory_order_release);
}

void unregister_capture(int device, cudaStream_t stream) noexcept {
  std::lock_guard<std::mutex> lock(capture_mutex());
  auto& entries = capture_entries();
  for (auto it = entries.begin(); it != entries.end(); ++it)
    if (it->device == device && it->stream == stream) {
      entries.erase(it);
      g_capture_count.fetch_sub(1, std::memory_order_release);
      return;
    }
}

bool any_capture() { return g_capture_count.load(std::memory_order_acquire) > 0; }

cudaStream_t capturing_stream(int device) {
  if (!any_capture()) return nullptr;
  std::lock_guard<std::mutex> lock(capture_mutex());
  cudaStream_t found = nullptr;
  for (const CaptureEntry& e : capture_entries()) {
    if (e.device != device) continue;
    if (e.thread == std::this_thread::get_id()) return e.stream;
    if (!found) found = e.stream;
  }
  return found;
}

cudaStream_t thread_capturing_stream(int device) {
  if (t_captures == 0 || !any_capture()) return nullptr;
  std::lock_guard<std::mutex> lock(capture_mutex());
  for (const CaptureEntry& e : capture_entries())
    if (e.device == device && e.thread == std::this_thread::get_id()) return e.stream;
  return nullptr;
}

bool stream_is_capturing(int device, cudaStream_t stream) {
  if (!any_capture()) return false;
  set_device(device);  // a null stream means this device's legacy default stream
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &status);
  if (err == cudaErrorStreamCaptureImplicit) {
    // The legacy default stream while a blocking stream of the device is captured: using it breaks the capture.
    (void)cudaGetLastError();
    return true;
  }
  if (err != cudaSuccess) throw_cuda_error(err, "cudaStreamIsCapturing", __FILE__, __LINE__);
  return status != cudaStreamCaptureStatusNone;
}

detail::GraphRandom* capture_random(int device, cudaStream_t stream) {
  if (!any_capture() || !stream_is_capturing(device, stream)) return nullptr;
  std::lock_guard<std::mutex> lock(capture_mutex());
  detail::GraphRandom* found = nullptr;
  for (const CaptureEntry& e : capture_entries()) {
    if (e.device != device || !e.random) continue;
    if (e.stream == stream) return e.random;
    if (e.thread == std::this_thread::get_id()) found = e.random;  // `stream` may be forked into this capture
  }
  return found;
}

std::string stream_name(int device, cudaStream_t stream) {
  if (!stream) return "the default stream of cuda:" + std::to_string(device);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<void*>(stream));
  return "Stream(cuda:" + std::to_string(device) + ", " + buf + ")";
}

void throw_during_capture(const std::string& action, int device, cudaStream_t capturing) {
  throw ValueError(action + " while " + stream_name(device, capturing) +
                   " is capturing a CUDA graph; move it after the capture (the end of the GraphCapture scope or "
                   "Graph::capture_end)");
}

void keep_for_capture(int device, cudaStream_t stream, std::shared_ptr<Storage> storage) {
  if (!any_capture()) return;
  std::lock_guard<std::mutex> lock(capture_mutex());
  CaptureEntry* own = nullptr;  // this thread's capture on the device: `stream` may be forked into it
  for (CaptureEntry& e : capture_entries()) {
    if (e.device != device || !e.keep) continue;
    if (e.stream == stream) {
      e.keep->push_back(std::move(storage));
      return;
    }
    if (e.thread == std::this_thread::get_id()) own = &e;
  }
  if (own) own->keep->push_back(std::move(storage));
}

}  // namespace kiln::cuda_impl
