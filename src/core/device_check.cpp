// Deferred device checks: the message table, the CPU path, and the hand-off to a GPU backend.
#include "core/device_check.hpp"

#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/step_trace.hpp"
#include "kiln/error.hpp"
#include "kiln/ops.hpp"

namespace kiln::detail {

namespace {

struct Message {
  CheckError kind;
  std::string text;
};

/// Codes are indices + 1 into `messages`; a check in a loop registers the same text each time and finds it.
struct MessageTable {
  std::mutex mutex;
  std::vector<Message> messages;
  std::unordered_map<std::string, int32_t> codes;  // kind as the first character, then the text
};

MessageTable& table() {
  static auto* t = new MessageTable;  // leaked: a backend may throw during static destruction
  return *t;
}

constexpr size_t kMaxMessages = 1 << 16;  // distinct texts kept; beyond, a generic text per kind

std::string filled(const std::string& message, int64_t value) {
  std::string out = message;
  const std::string v = std::to_string(value);
  for (size_t at = out.find("{value}"); at != std::string::npos; at = out.find("{value}", at + v.size()))
    out.replace(at, 7, v);
  return out;
}

[[noreturn]] void raise(CheckError kind, const std::string& text) {
  if (kind == CheckError::Shape) throw ShapeError(text);
  throw ValueError(text);
}

}  // namespace

int32_t deferred_check_code(CheckError kind, const std::string& message) {
  MessageTable& t = table();
  std::lock_guard lock(t.mutex);
  std::string key = (kind == CheckError::Shape ? "S" : "V") + message;
  if (auto it = t.codes.find(key); it != t.codes.end()) return it->second;
  if (t.messages.size() >= kMaxMessages) {
    key = kind == CheckError::Shape ? "S" : "V";
    if (auto it = t.codes.find(key); it != t.codes.end()) return it->second;
    t.messages.push_back({kind, "a device-side check failed (value {value})"});
  } else {
    t.messages.push_back({kind, message});
  }
  const auto code = static_cast<int32_t>(t.messages.size());
  t.codes.emplace(std::move(key), code);
  return code;
}

void throw_deferred_check(int32_t code, int64_t value, Device device) {
  Message m{CheckError::Value, "a device-side check failed (value {value})"};
  {
    MessageTable& t = table();
    std::lock_guard lock(t.mutex);
    if (code > 0 && static_cast<size_t>(code) <= t.messages.size()) m = t.messages[static_cast<size_t>(code) - 1];
  }
  raise(m.kind, filled(m.text, value) + " (found on " + device.str() +
                    " by a check kernel and reported at this synchronisation; the failing op was queued earlier)");
}

void check_range(const Array& values, int64_t lo, int64_t hi, CheckError kind, const std::string& message) {
  if (values.size() == 0) return;
  const Array v = values.astype(int64).contiguous();
  if (!v.device().is_cpu() && backend_for(v.device()).check_range(v, lo, hi, deferred_check_code(kind, message)))
    return;
  // The CPU, or a backend without check kernels (its values read back): checked here, now (and at each replay
  // of a traced step).
  const Array host = v.device().is_cpu() ? v : v.to(cpu());
  auto check = [host, lo, hi, kind, message] {
    const auto* p = static_cast<const int64_t*>(host.data_ptr());
    for (int64_t i = 0, n = host.size(); i < n; ++i)
      if (p[i] < lo || p[i] >= hi) raise(kind, filled(message, p[i]));
  };
  host_step("check_range", {host}, check, check);
}

}  // namespace kiln::detail
