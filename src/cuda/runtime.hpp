// CUDA runtime glue shared by the CUDA backend's files (internal): checked
// calls, device selection, per-thread current streams. This folder links
// against CUDA but contains no .cu files: kernels are generated and compiled
// at run time with NVRTC.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "kiln/error.hpp"

namespace kiln {
class Storage;
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
/// workspaces); returned to the pool when the last reference goes. Throws OutOfMemoryError.
std::shared_ptr<Storage> device_alloc(int device, size_t bytes, cudaStream_t stream);
/// Marks device memory of `storage` (from device_alloc or CudaBackend::allocate) as used by `stream`,
/// so it is not reused before the work queued there so far is done. No-op for other storages.
void record_stream(const Storage& storage, cudaStream_t stream);

}  // namespace kiln::cuda_impl
