// kiln::profiler's session (include/kiln/profiler.hpp): one active profiler per process, host ranges from
// any thread, and the GPU's records through the build's ActivityTracer (CUPTI in src/cuda). The summary and
// the Chrome trace are in profiler_report.cpp.
#include "kiln/profiler.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <utility>

#include "core/profiler_tracer.hpp"
#include "kiln/device.hpp"
#include "kiln/error.hpp"

namespace kiln::profiler {
namespace {

struct Session {
  std::mutex mutex;  // guards profile, tracer and next_id; Range destructors take it from any thread
  // The active session's id (0: none). Read without the lock by Range, so an inactive profiler costs a Range
  // one atomic load.
  std::atomic<uint64_t> active{0};
  // Set while the tracer records, so that ranges and the GPU's records share one clock.
  std::atomic<detail::ActivityTracer*> clock{nullptr};
  uint64_t next_id = 1;
  detail::ActivityTracer* tracer = nullptr;
  Profile profile;
};

Session& session() {
  static Session s;
  return s;
}

thread_local int t_depth = 0;

uint32_t os_thread_id() { return static_cast<uint32_t>(::syscall(SYS_gettid)); }

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <class Record>
void sort_by_start(std::vector<Record>& v) {
  std::stable_sort(v.begin(), v.end(), [](const Record& a, const Record& b) { return a.start_ns < b.start_ns; });
}

}  // namespace

int64_t now_ns() {
  detail::ActivityTracer* t = session().clock.load();
  return t ? t->timestamp_ns() : steady_ns();
}

bool active() { return session().active.load() != 0; }

void start() {
  Session& s = session();
  std::lock_guard lock(s.mutex);
  if (s.active.load() != 0)
    throw ValueError(
        "kiln::profiler::start: a profiler is already active (one at a time per process); call "
        "kiln::profiler::stop() to end it before starting another");
  s.profile = Profile{};
  s.tracer = nullptr;
  if (num_gpus() > 0) {
    detail::ActivityTracer* t = detail::builtin_activity_tracer();
    std::string why = t ? t->unavailable() : std::string("this kiln has no CUDA backend");
    if (why.empty()) {
      // A refusal (another profiler holds CUPTI, profiling restricted to administrators) leaves the host
      // ranges worth recording: the profile says why the GPU is missing instead of failing the program.
      try {
        t->start();
        s.tracer = t;
        s.clock.store(t);
      } catch (const DeviceError& e) {
        why = e.what();
      }
    }
    if (!why.empty()) {
      static std::once_flag warned;
      std::call_once(warned, [&] { std::cerr << "kiln::profiler: GPU activity is not recorded: " << why << "\n"; });
      s.profile.gpu_note = "GPU activity not recorded: " + why;
    }
  }
  s.profile.start_ns = now_ns();
  s.active.store(s.next_id++);
}

Profile stop() {
  Session& s = session();
  std::lock_guard lock(s.mutex);
  if (s.active.load() == 0)
    throw ValueError("kiln::profiler::stop: no profiler is active; call kiln::profiler::start() first");
  Profile out = std::move(s.profile);
  s.profile = Profile{};
  detail::ActivityTracer* t = std::exchange(s.tracer, nullptr);
  // The session ends whatever the tracer does next: a failed flush must not leave start() refused forever.
  struct End {
    Session& s;
    ~End() {
      s.active.store(0);
      s.clock.store(nullptr);
    }
  } end{s};
  if (t) {
    try {
      t->synchronize();
    } catch (...) {
      Profile discarded;  // a GPU error: CUPTI still stops recording before the error reaches the caller
      try {
        t->stop(discarded);
      } catch (...) {
      }
      throw;
    }
  }
  out.stop_ns = now_ns();
  s.active.store(0);  // ranges closing from here on belong to no session
  if (t) t->stop(out);
  sort_by_start(out.kernels);
  sort_by_start(out.transfers);
  sort_by_start(out.api_calls);
  sort_by_start(out.ranges);
  return out;
}

Range::Range(std::string name) : name_(std::move(name)) {
  session_ = session().active.load();
  if (session_ == 0) return;
  depth_ = t_depth++;
  start_ns_ = now_ns();
}

Range::~Range() {
  if (session_ == 0) return;
  --t_depth;
  const int64_t end = now_ns();
  Session& s = session();
  if (s.active.load() != session_) return;
  std::lock_guard lock(s.mutex);
  if (s.active.load() != session_) return;  // stop() ran between the check and the lock
  s.profile.ranges.push_back(RangeRecord{std::move(name_), start_ns_, end, os_thread_id(), depth_});
}

}  // namespace kiln::profiler
