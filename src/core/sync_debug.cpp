// The one owner of the sync and transfer accounting: per-thread counters, the
// per-thread mode stack of SyncDebugGuard, KILN_SYNC_DEBUG, and the reports.
#include "core/sync_debug.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/env.hpp"
#include "kiln/error.hpp"

namespace kiln {

namespace {
thread_local SyncCounters t_counters;
thread_local bool t_mode_set = false;  // a SyncDebugGuard is active on this thread
thread_local SyncDebugMode t_mode = SyncDebugMode::off;
thread_local const char* t_op = nullptr;

// KILN_SYNC_DEBUG, read once. A bad value is kept as text and reported at first use (no throw
// during static initialisation).
struct EnvMode {
  SyncDebugMode mode = SyncDebugMode::off;
  std::string bad;
};
const EnvMode& env_mode() {
  static const EnvMode env = [] {
    EnvMode e;
    const std::optional<std::string> v = detail::env_string("KILN_SYNC_DEBUG");
    if (!v) return e;
    try {
      e.mode = parse_sync_debug_mode(*v);
    } catch (const ValueError&) {
      e.bad = *v;
    }
    return e;
  }();
  return env;
}

std::string bytes_str(uint64_t b) {
  char buf[32];
  if (b >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.3g GB", static_cast<double>(b) / 1e9);
  else if (b >= 1000000)
    std::snprintf(buf, sizeof buf, "%.3g MB", static_cast<double>(b) / 1e6);
  else if (b >= 1000)
    std::snprintf(buf, sizeof buf, "%.3g kB", static_cast<double>(b) / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  return buf;
}

std::string copies_str(uint64_t n, const char* what, uint64_t bytes) {
  return std::to_string(n) + " " + what + (n == 1 ? " copy" : " copies") + " (" + bytes_str(bytes) + ")";
}
}  // namespace

SyncCounters SyncCounters::operator-(const SyncCounters& e) const {
  SyncCounters d;
  d.syncs = syncs - e.syncs;
  d.explicit_syncs = explicit_syncs - e.explicit_syncs;
  d.h2d_copies = h2d_copies - e.h2d_copies;
  d.h2d_bytes = h2d_bytes - e.h2d_bytes;
  d.d2h_copies = d2h_copies - e.d2h_copies;
  d.d2h_bytes = d2h_bytes - e.d2h_bytes;
  d.d2d_copies = d2d_copies - e.d2d_copies;
  d.d2d_bytes = d2d_bytes - e.d2d_bytes;
  return d;
}

std::string SyncCounters::str() const {
  return std::to_string(syncs) + (syncs == 1 ? " sync, " : " syncs, ") + copies_str(h2d_copies, "H2D", h2d_bytes) +
         ", " + copies_str(d2h_copies, "D2H", d2h_bytes) + ", " + copies_str(d2d_copies, "D2D", d2d_bytes) + ", " +
         std::to_string(explicit_syncs) + (explicit_syncs == 1 ? " explicit sync" : " explicit syncs");
}

SyncCounters sync_counters() { return t_counters; }
void reset_sync_counters() { t_counters = SyncCounters{}; }

const char* sync_debug_mode_name(SyncDebugMode mode) {
  switch (mode) {
    case SyncDebugMode::off:
      return "off";
    case SyncDebugMode::warn:
      return "warn";
    case SyncDebugMode::error:
      return "error";
  }
  return "off";
}

SyncDebugMode parse_sync_debug_mode(const std::string& name) {
  if (name == "off" || name == "0") return SyncDebugMode::off;
  if (name == "warn" || name == "1") return SyncDebugMode::warn;
  if (name == "error" || name == "2") return SyncDebugMode::error;
  throw ValueError("sync debug mode '" + name + "' is not one of off, warn, error (KILN_SYNC_DEBUG=warn|error)");
}

SyncDebugMode sync_debug_mode() {
  if (t_mode_set) return t_mode;
  const EnvMode& env = env_mode();
  if (!env.bad.empty()) parse_sync_debug_mode(env.bad);  // throws, naming the variable's value
  return env.mode;
}

SyncDebugGuard::SyncDebugGuard(SyncDebugMode mode) : previous_(t_mode), previous_set_(t_mode_set), start_(t_counters) {
  t_mode = mode;
  t_mode_set = true;
}

SyncDebugGuard::~SyncDebugGuard() {
  t_mode = previous_;
  t_mode_set = previous_set_;
}

namespace detail {

SyncOpScope::SyncOpScope(const char* op) noexcept : owner_(t_op == nullptr) {
  if (owner_) t_op = op;
}
SyncOpScope::~SyncOpScope() {
  if (owner_) t_op = nullptr;
}

void note_explicit_sync() { ++t_counters.explicit_syncs; }

void note_copy(CopyDirection direction, size_t bytes, Device device, bool synchronizes) {
  const char* dir = "D2D";
  switch (direction) {
    case CopyDirection::HostToDevice:
      dir = "H2D";
      break;
    case CopyDirection::DeviceToHost:
      dir = "D2H";
      break;
    case CopyDirection::DeviceToDevice:
      break;
  }
  const bool host = direction != CopyDirection::DeviceToDevice;
  const SyncDebugMode mode = host ? sync_debug_mode() : SyncDebugMode::off;
  if (mode != SyncDebugMode::off) {  // off (the default): only the counters below, no strings
    const std::string op = t_op ? t_op : "to()";
    if (mode == SyncDebugMode::error && synchronizes)
      throw Error("implicit synchronisation in " + op + " on " + device.str() + " (" + bytes_str(bytes) + " " + dir +
                  ") while sync debugging is in error mode (SyncDebugGuard or KILN_SYNC_DEBUG=error); keep the "
                  "data on the device, or copy non_blocking into pinned memory and synchronise once");
    std::fprintf(stderr, "kiln: %s in %s on %s (%s %s)\n",
                 synchronizes ? "implicit synchronisation" : "asynchronous host<->device copy", op.c_str(),
                 device.str().c_str(), bytes_str(bytes).c_str(), dir);
  }
  switch (direction) {
    case CopyDirection::HostToDevice:
      ++t_counters.h2d_copies;
      t_counters.h2d_bytes += bytes;
      break;
    case CopyDirection::DeviceToHost:
      ++t_counters.d2h_copies;
      t_counters.d2h_bytes += bytes;
      break;
    case CopyDirection::DeviceToDevice:
      ++t_counters.d2d_copies;
      t_counters.d2d_bytes += bytes;
      break;
  }
  if (synchronizes && host) ++t_counters.syncs;
}

}  // namespace detail
}  // namespace kiln
