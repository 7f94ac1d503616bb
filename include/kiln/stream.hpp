// Streams and events: ordered queues of device work and markers in them, like
// cupy.cuda.Stream / torch.cuda.Event. On the CPU, work runs synchronously:
// a CPU stream is a no-op queue and a CPU event records the host clock.
#pragma once

#include <memory>
#include <string>

#include "kiln/device.hpp"

namespace kiln {

struct StreamOptions {
  bool non_blocking = false;  ///< does not synchronise with the legacy default stream
  int priority = 0;           ///< lower numbers are higher priority (CUDA convention); clamped to the device's range
};

/// A queue of work on one device. Copying a Stream shares the same queue.
class Stream {
 public:
  /// A new stream on `device` (a no-op stream on the CPU).
  static Stream create(Device device, StreamOptions options = {});
  /// The device's default (legacy NULL) stream.
  static Stream default_stream(Device device);
  /// This thread's current stream on `device`: where its ops are queued (the default stream unless a StreamGuard says otherwise).
  static Stream current(Device device);

  Device device() const { return device_; }
  /// The native handle (cudaStream_t), nullptr for the default stream and on the CPU.
  void* handle() const { return handle_; }
  /// Blocks the host until all work queued so far on this stream is done.
  void synchronize() const;
  /// True when all queued work is done (never blocks).
  bool query() const;
  bool operator==(const Stream& o) const { return device_ == o.device_ && handle_ == o.handle_; }
  std::string str() const;

  Stream(Device device, void* handle, std::shared_ptr<void> owner) : device_(device), handle_(handle), owner_(std::move(owner)) {}

 private:
  Device device_;
  void* handle_ = nullptr;
  std::shared_ptr<void> owner_;  // destroys the native stream with the last copy
};

/// RAII: makes `stream` the current stream of its device for this thread, for the guard's scope
/// (the guard keeps the stream alive meanwhile). Not copyable.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  Stream current_;
};

/// A marker in a stream, for ordering (wait) and timing (elapsed_ms).
class Event {
 public:
  /// A new event on `device`; `timing` enables elapsed_ms (disable it for pure synchronisation: cheaper).
  static Event create(Device device, bool timing = true);
  /// Records the event at the current end of `stream` (default: the device's current stream).
  void record();
  void record(const Stream& stream);
  /// Makes future work on `stream` wait until this event has completed (the host does not block).
  void wait(const Stream& stream) const;
  /// Blocks the host until the event has completed.
  void synchronize() const;
  /// True when the event has completed (never blocks).
  bool query() const;
  /// Milliseconds between this event and `end` (both recorded and completed; synchronises on `end`).
  /// Throws ValueError when either was not recorded or timing is disabled.
  float elapsed_ms(const Event& end) const;
  Device device() const { return device_; }
  void* handle() const { return handle_; }

  Event(Device device, void* handle, std::shared_ptr<void> owner, bool timing)
      : device_(device), handle_(handle), owner_(std::move(owner)), timing_(timing) {}

 private:
  Device device_;
  void* handle_ = nullptr;
  std::shared_ptr<void> owner_;
  bool timing_ = true;
  bool recorded_ = false;
  double host_time_ms_ = 0.0;  // CPU events: host clock at record
};

/// Properties of a device (for the CPU: its name and core count).
struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;         ///< compute capability
  size_t total_memory = 0;          ///< bytes
  size_t free_memory = 0;           ///< bytes, at the time of the call
  int multiprocessors = 0;          ///< SMs (CPU: hardware threads)
  size_t l2_cache_bytes = 0;
  size_t shared_memory_per_block = 0;
  int warp_size = 0;
  double memory_bandwidth_gbs = 0;  ///< theoretical, from clock and bus width (0 when unknown)
  int clock_mhz = 0;                ///< the SMs' peak clock as the driver reports it (0 when unknown; CPU: 0)
};
/// A GPU's dense bfloat16 tensor-core peak in TFLOP/s (no sparsity): the denominator of model FLOPs utilisation
/// (MFU) as llm.c and nanoGPT count it. SMs x clock x the architecture's bfloat16 FLOPs per SM and clock (sm_80
/// 2048; sm_86/sm_89 1024, the data-centre parts' rate (GeForce cards accumulate in float32 at half of it); sm_90
/// 4096; sm_100 8192). The clock is the one NVIDIA's published figure uses for the H100 and H200 (1830 MHz SXM,
/// 1620 PCIe, 1545 NVL: 989 TFLOP/s for an H100 SXM, 756 PCIe), else the reported peak clock. 0 for the CPU, an
/// architecture not listed, or an unknown clock.
double peak_bf16_tflops(const DeviceProperties& properties);
/// Properties of `device`; throws DeviceError for a missing GPU.
DeviceProperties device_properties(Device device);
/// Blocks until all work queued on `device` (every stream) is done.
void synchronize(Device device);

}  // namespace kiln
