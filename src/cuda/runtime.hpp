// CUDA runtime glue shared by the CUDA backend's files (internal): checked
// calls, device selection, per-thread current streams. This folder links
// against CUDA but contains no .cu files: kernels are generated and compiled
// at run time with NVRTC.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.hpp"

namespace kiln {
class Storage;
}
namespace kiln::detail {
struct GraphRandom;
}

namespace kiln::cuda_impl {

/// Throws CudaError naming the call, file:line, the current device and CUDA's message.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

#define KILN_CUDA_CHECK(expr)                                                          \
  do {                                                                                 \
    cudaError_t kiln_err_ = (expr);                                                    \
    if (kiln_err_ != cudaSuccess) ::kiln::cuda_impl::throw_cuda_error(kiln_err_, #expr, __FILE__, __LINE__); \
  } while (0)

/// Number of usable GPUs; 0 (never an exception) when the driver or the hardware is missing.
int device_count();
/// Makes `device` current for this thread's CUDA calls (cheap when it already is).
void set_device(int device);
/// The device this thread last made current through set_device (-1: none yet); no CUDA call.
int current_device() noexcept;
/// This thread's current stream on `device` (nullptr = legacy default stream).
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);
/// Compute capability as major*10+minor (e.g. 90 for an H100), cached per device.
int compute_capability(int device);

// --- added by the runtime/allocator engineer (runtime.cpp) ---

/// Throws DeviceError naming `op` unless 0 <= device < device_count().
void check_device(int device, const char* op);
/// The number of device slots per-thread state is kept for (current streams, cached current device).
inline constexpr int kMaxDevices = 64;
/// A timing-disabled event of `device` from a per-device pool, for internal ordering (barriers, pools).
cudaEvent_t acquire_event(int device);
/// Gives an event from acquire_event back to its pool. Never throws.
void release_event(int device, cudaEvent_t event) noexcept;
/// Enables peer access from `device` to `peer` (both directions) once per pair when
/// cudaDeviceCanAccessPeer allows it; returns whether `device` can address `peer`'s memory.
bool enable_peer_access(int device, int peer);
/// `bytes` of device memory from `device`'s caching allocator, ordered on `stream` (scratch space,
/// workspaces); returned to the pool when the last reference goes. While `stream` is being captured into a
/// CUDA graph the memory comes from the graph's private pool unless `graph_pool` is false (memory kept
/// beyond the graph's life, such as cuBLAS workspaces). Throws OutOfMemoryError.
std::shared_ptr<Storage> device_alloc(int device, size_t bytes, cudaStream_t stream, bool graph_pool = true);
/// Marks device memory of `storage` (from device_alloc or CudaRuntime::allocate) as used by `stream`,
/// so it is not reused before the work queued there so far is done. No-op for other storages.
void record_stream(const Storage& storage, cudaStream_t stream);

// --- CUDA graph capture state (graph.cpp registers captures; sync paths, the allocator and the pinned pool
// consult it). Captures use cudaStreamCaptureModeThreadLocal: CUDA then forbids the capturing thread calls
// that may synchronise or query (event queries and waits, cudaFree, cudaMalloc outside relaxed mode).

/// Graph captures this thread has under way, on any device (0 almost always; no CUDA call).
int thread_captures();
/// RAII: counts one capture of this thread for its scope. No CUDA call (tests use it with fake allocators).
class ThreadCaptureScope {
 public:
  ThreadCaptureScope();
  ~ThreadCaptureScope();
  ThreadCaptureScope(const ThreadCaptureScope&) = delete;
  ThreadCaptureScope& operator=(const ThreadCaptureScope&) = delete;
};
/// RAII: while this thread captures, switches it to cudaStreamCaptureModeRelaxed for the scope, so that a
/// call CUDA refuses during a thread-local capture but which does not touch the captured streams
/// (cudaMalloc, cudaHostAlloc, loading a module) is allowed, as PyTorch does around cudaMalloc. A no-op
/// (no CUDA call) when the thread captures nothing.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  bool active_ = false;
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};
/// Records that this thread captures `stream` of `device`; `keep` (owned by the graph, alive until
/// unregister_capture) receives the host buffers that captured copies read or write; `random` (idem) counts
/// the Philox blocks of the random draws captured (random->state: the graph's state word, allocated by the
/// graph before anything else of its capture).
void register_capture(int device, cudaStream_t stream, std::vector<std::shared_ptr<Storage>>* keep,
                      detail::GraphRandom* random = nullptr);
void unregister_capture(int device, cudaStream_t stream) noexcept;
/// True while any thread has a registered capture (one atomic load: the fast path of every check below).
bool any_capture();
/// A stream being captured on `device` (by this thread first, else by any thread), or nullptr.
cudaStream_t capturing_stream(int device);
/// The stream this thread captures on `device`, or nullptr.
cudaStream_t thread_capturing_stream(int device);
/// True when work queued on `stream` of `device` now would be captured (cudaStreamIsCapturing), or would break
/// a capture (the legacy default stream while a blocking stream is captured). No CUDA call when no capture is
/// registered.
bool stream_is_capturing(int device, cudaStream_t stream);
/// Throws ValueError: "<action> while <the capturing stream> is capturing a CUDA graph; move it after the capture".
[[noreturn]] void throw_during_capture(const std::string& action, int device, cudaStream_t capturing);
/// Hands `storage` (a host buffer read or written by a copy captured on `stream`) to the graph capturing that
/// stream (or, for a stream forked into a capture, to this thread's capture on `device`), which keeps it alive
/// while it may be replayed. No-op when neither exists.
void keep_for_capture(int device, cudaStream_t stream, std::shared_ptr<Storage> storage);
/// The random bookkeeping of the capture that work queued on `stream` of `device` now would join: the capture of
/// that stream, else (a stream forked into a capture) this thread's capture on the device; nullptr when the work
/// would not be captured. One atomic load when no capture is registered.
detail::GraphRandom* capture_random(int device, cudaStream_t stream);
/// "Stream(cuda:0, 0x...)" or "the default stream of cuda:0".
std::string stream_name(int device, cudaStream_t stream);

}  // namespace kiln::cuda_impl
