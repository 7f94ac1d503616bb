// Internal hooks of the sync and transfer accounting (public side: kiln/debug.hpp)
// and of kiln::bench's device tracking. Backends call these; core names the op.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/debug.hpp"
#include "kiln/device.hpp"

namespace kiln::detail {

enum class CopyDirection { HostToDevice, DeviceToHost, DeviceToDevice };

/// Called by a backend before it copies `bytes` between host and `device` (or between GPUs):
/// counts the copy (and the synchronisation when `synchronizes`) and reports it in the mode in
/// force; in error mode an implicit synchronisation throws Error before anything is copied.
void note_copy(CopyDirection direction, size_t bytes, Device device, bool synchronizes);
/// Called for an explicit synchronize() on a GPU device, stream or event.
void note_explicit_sync();

/// RAII: names the user-visible op ("item()", "print") in reports of the copies it makes;
/// the outermost scope wins (item() calls to(), and the user wrote item()).
class SyncOpScope {
 public:
  explicit SyncOpScope(const char* op) noexcept;
  ~SyncOpScope();
  SyncOpScope(const SyncOpScope&) = delete;
  SyncOpScope& operator=(const SyncOpScope&) = delete;

 private:
  bool owner_;
};

/// GPUs this thread queued work on (bit i: cuda:i, the first 64), for kiln::bench's default
/// device set. A backend marks a GPU whenever it queues a kernel, a copy or a library call.
inline thread_local uint64_t t_gpus_touched = 0;
inline void note_gpu_work(int index) noexcept {
  if (index >= 0 && index < 64) t_gpus_touched |= uint64_t{1} << index;
}

}  // namespace kiln::detail
