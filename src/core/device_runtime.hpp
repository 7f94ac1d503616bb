// The device runtime interface (internal), apart from the ops (as c10's DeviceGuardImplInterface):
// memory, copies, devices, streams and events of one device type. Every device type — the CPU
// included — implements it once; `Backend` (core/backend.hpp) runs the ops. Streams and events
// travel as opaque handles (cudaStream_t, cudaEvent_t on CUDA; nullptr on the CPU), so core
// needs no backend header.
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/array.hpp"
#include "kiln/stream.hpp"

namespace kiln::detail {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  /// Allocates `nbytes` on `device` (64-byte aligned on the CPU). Throws OutOfMemoryError.
  virtual std::shared_ptr<Storage> allocate(int64_t nbytes, Device device, const ArrayOptions& options) = 0;
  /// Copies contiguous `src` into contiguous `dst` of the same dtype and size when at least one of them
  /// is on this runtime's devices (host<->device, device<->device), ordered on `stream` (a stream of src's or
  /// dst's device, the default stream included; nullptr: the current stream of the device side). Unless
  /// `non_blocking`, returns only when the data can be used by the host (device->host) or the source may be
  /// reused (host->device from pageable memory).
  virtual void transfer(const Array& src, const Array& dst, const Stream* stream = nullptr,
                        bool non_blocking = false) = 0;
  /// Waits for all work queued on `device`.
  virtual void synchronize(Device device) = 0;
  /// Number of devices of this type that can be used (0 when the driver or hardware is missing).
  virtual int device_count() = 0;
  virtual DeviceProperties properties(Device device) = 0;

  /// A new stream (nullptr where work is synchronous), and its release (never throws: shared_ptr deleters call it).
  virtual void* stream_create(Device device, const StreamOptions& options) = 0;
  virtual void stream_destroy(Device device, void* stream) = 0;
  /// This thread's current stream on the device (nullptr: the default stream).
  virtual void* current_stream(Device device) = 0;
  virtual void set_current_stream(Device device, void* stream) = 0;
  /// Blocks until `stream`'s queued work is done; query: whether it is, without blocking.
  virtual void stream_synchronize(Device device, void* stream) = 0;
  virtual bool stream_query(Device device, void* stream) = 0;
  /// A new event (`timing`: elapsed_ms may use it), and its release (never throws).
  virtual void* event_create(Device device, bool timing) = 0;
  virtual void event_destroy(Device device, void* event) = 0;
  /// Records `event` at the end of `stream`; wait: `stream`'s later work waits for it (the host does not).
  virtual void event_record(Device device, void* event, void* stream) = 0;
  virtual void event_wait(Device device, void* event, void* stream) = 0;
  virtual void event_synchronize(Device device, void* event) = 0;
  virtual bool event_query(Device device, void* event) = 0;
  /// Milliseconds from `start` to `end`, both recorded; synchronises on `end`.
  virtual float event_elapsed_ms(Device device, void* start, void* end) = 0;
  /// Marks `a`'s memory as used by `stream`, so the allocator does not reuse it before that stream's work is done.
  virtual void record_stream(const Array& a, void* stream) = 0;
};

/// The runtime of `device`'s type; throws DeviceError when this build has none.
DeviceRuntime& runtime_for(Device device);
/// The built-in runtime of a device type, or nullptr when this build has none
/// (defined in src/backends.cpp, the one place that knows which backends exist).
DeviceRuntime* builtin_runtime(DeviceType type);

}  // namespace kiln::detail
