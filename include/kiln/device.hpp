// Devices: a small value type {type, index}, device discovery and the
// per-thread current device.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kiln {

enum class DeviceType : uint8_t { CPU, CUDA };

/// Where an Array's storage lives: the host, or CUDA GPU `index`.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;
  /// "cpu" or "cuda:1".
  std::string str() const;
};

/// Writes d.str(): "cpu" or "cuda:1".
std::ostream& operator<<(std::ostream& os, Device d);

/// The host.
constexpr Device cpu() { return Device{DeviceType::CPU, 0}; }
/// CUDA GPU i; throws DeviceError when it does not exist (see try_gpu for a fallback).
Device gpu(int i = 0);
/// Number of CUDA GPUs usable by this build (0 in a CPU-only build, without a driver, or without a GPU).
int num_gpus();
/// GPU i when it exists, else the CPU (like d2l's try_gpu).
Device try_gpu(int i = 0);
/// Every GPU, or {cpu()} when there is none.
std::vector<Device> try_all_gpus();
/// Parses "cpu", "cuda", "cuda:1", "gpu:0"; throws ValueError.
Device parse_device(const std::string& name);

/// The current device of this thread: where creation functions without an explicit device allocate. Starts as cpu().
Device current_device();
/// Sets the current device of this thread; prefer DeviceGuard.
void set_current_device(Device d);

/// RAII: makes `d` the current device of this thread for the guard's scope. Not copyable.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device d);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Device previous_;
};

}  // namespace kiln
