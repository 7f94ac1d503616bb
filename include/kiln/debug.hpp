// Sync and transfer accounting: every host<->device copy and every implicit
// host-device synchronisation kiln performs is counted (per thread), and can be
// reported as it happens (warn: one line on stderr; error: an exception naming
// the op), so a training loop can check that a step makes 0 syncs.
//
// What counts (GPU arrays only; CPU work never synchronises or copies):
//  - a host->device or device->host copy: item(), to_vector(), printing, a.to(d),
//    copy_from(), with its byte count;
//  - an implicit synchronisation: a copy that makes the host wait for the device —
//    every device->host copy that is not non_blocking into pinned memory, every
//    host->device copy that is not non_blocking from pinned memory (pageable host
//    memory always counts: the host waits for staging buffers);
//  - a copy between two GPUs (counted as D2D, never reported: it does not involve the host;
//    copies within one GPU are ordinary kernels/copy-engine work and are not counted).
// Counters are per thread: work another thread issues is counted on that thread.
// Explicit waits (kiln::synchronize, Stream::synchronize, Event::synchronize) are
// what you asked for: counted separately as explicit_syncs, never reported.
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

/// How implicit synchronisations and host<->device copies are reported.
enum class SyncDebugMode {
  off,    ///< counted only
  warn,   ///< one line on stderr per copy or implicit synchronisation
  error,  ///< an implicit synchronisation throws kiln::Error naming the op (asynchronous copies only warn)
};

/// Counts of this thread's copies and synchronisations (see the list at the top of this header).
struct SyncCounters {
  uint64_t syncs = 0;           ///< implicit host-device synchronisations
  uint64_t explicit_syncs = 0;  ///< synchronize() calls on GPU devices, streams and events
  uint64_t h2d_copies = 0, h2d_bytes = 0;
  uint64_t d2h_copies = 0, d2h_bytes = 0;
  uint64_t d2d_copies = 0, d2d_bytes = 0;
  /// Field-wise difference (counts between two snapshots).
  SyncCounters operator-(const SyncCounters& earlier) const;
  bool operator==(const SyncCounters&) const = default;
  /// "2 syncs, 1 H2D copy (4 MB), 1 D2H copy (4 B), 0 D2D copies, 0 explicit syncs".
  std::string str() const;
};

/// This thread's counters since the thread started or since reset_sync_counters().
SyncCounters sync_counters();
/// Sets this thread's counters to zero.
void reset_sync_counters();

/// The mode in force on this thread: the innermost SyncDebugGuard's, else KILN_SYNC_DEBUG
/// (off|warn|error, read once; another value throws ValueError at the first copy), else off.
SyncDebugMode sync_debug_mode();
/// "off", "warn", "error"; parse_sync_debug_mode throws ValueError for anything else.
const char* sync_debug_mode_name(SyncDebugMode mode);
SyncDebugMode parse_sync_debug_mode(const std::string& name);

/// RAII: sets this thread's sync debug mode for the scope and counts what happens in it.
/// `SyncDebugGuard g(SyncDebugMode::error); step(); ` throws at the first implicit sync in step().
/// Not copyable.
class SyncDebugGuard {
 public:
  explicit SyncDebugGuard(SyncDebugMode mode = SyncDebugMode::warn);
  ~SyncDebugGuard();
  SyncDebugGuard(const SyncDebugGuard&) = delete;
  SyncDebugGuard& operator=(const SyncDebugGuard&) = delete;
  /// This thread's copies and synchronisations since the guard was made.
  SyncCounters counters() const { return sync_counters() - start_; }

 private:
  SyncDebugMode previous_;
  bool previous_set_;
  SyncCounters start_;
};

}  // namespace kiln
