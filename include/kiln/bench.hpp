// Measuring right: kiln::bench times a function with warm-up, per-repeat host
// time and per-GPU event time (like cupyx.profiler.benchmark), and Timer times
// regions inside a running program with events, read later, without stalling it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/stream.hpp"

namespace kiln {

/// Summary of samples in seconds. stddev is the population standard deviation (NumPy's np.std, as CuPy).
struct Stats {
  double min = 0, median = 0, mean = 0, max = 0, stddev = 0;
  int count = 0;
};
/// Min, median (mean of the middle two for an even count), mean, max, stddev of `samples`.
Stats summarize(std::vector<double> samples);

/// How bench() measures.
struct BenchOptions {
  int warmup = 3;           ///< untimed calls first (they compile kernels and fill caches)
  int repeat = 20;          ///< timed calls at most
  double max_seconds = 10;  ///< stop repeating once the timed calls have taken this long (at least one runs)
  /// GPUs to time with events. Empty: the GPUs `fn` queued work on from this thread during warm-up (all GPUs
  /// when warmup is 0).
  /// CPU entries are not event-timed (the host time covers the CPU): {cpu()} times the host only.
  std::vector<Device> devices{};
  bool flush_l2 = false;  ///< overwrite each timed GPU's L2 (or the host's last-level cache) before each call, untimed
  std::string name{};     ///< shown by str() and json()
};

/// Event times of one GPU, seconds per repeat.
struct DeviceTimes {
  Device device;
  std::vector<double> seconds;
};

/// What bench() measured.
struct BenchResult {
  std::string name;
  int warmup = 0;
  /// Host wall time per repeat, in seconds, from before the call to after every timed GPU is synchronised
  /// (so it includes the launch overhead, the device work and the final synchronisation).
  std::vector<double> host_seconds;
  /// Per timed GPU: the time between events recorded on its current stream before and after the call.
  std::vector<DeviceTimes> device_seconds;

  int repeats() const { return static_cast<int>(host_seconds.size()); }
  Stats host() const { return summarize(host_seconds); }
  /// Event-time statistics of GPU `d`; throws ValueError when `d` was not timed.
  Stats device(Device d) const;
  /// The figure to report: the median event time of the first timed GPU, else the median host time.
  double seconds() const;
  /// One line in the style of cupyx.profiler.benchmark:
  /// "name    :    host: median    1234.567 us (min 1200.000, max 1300.000, std 12.345 us)     cuda:0: ...".
  std::string str() const;
  /// {"name", "warmup", "repeat", "host": {"seconds": [...], "min", "median", "mean", "max", "stddev"},
  ///  "devices": [{"device": "cuda:0", "seconds": [...], "min", ...}]} (seconds).
  std::string json() const;
};

/// Times `fn`: options.warmup untimed calls, then up to options.repeat timed calls. Each timed call
/// records a start event on every timed GPU's current stream, calls fn, records end events, then
/// synchronises those GPUs (every stream) before the host clock stops. Kernel compilation happens in
/// warm-up and is excluded. Synchronises; throws ValueError for bad options and whatever fn throws.
/// Work that fn queues on other streams is in the host time; join those streams to the current one
/// (Event::wait) for it to be in the event time too.
BenchResult bench(const std::function<void()>& fn, BenchOptions options = {});
/// As bench(fn, options) with options.name = name.
BenchResult bench(const std::string& name, const std::function<void()>& fn, BenchOptions options = {});

/// Times regions of a running program without stalling it: start()/stop() record events on a stream
/// (the device's current stream at start(), or the stream given); the times are read later, and only
/// reading waits (for the last recorded event). On the CPU, events read the host clock.
///   Timer t(gpu(0));
///   for (...) { t.start(); step(); t.stop(); }
///   std::cout << t.elapsed_ms() / t.count() << " ms per step\n";
class Timer {
 public:
  /// Times work on the current stream of `device` (read at each start()).
  explicit Timer(Device device = current_device());
  /// Times work on `stream`.
  explicit Timer(const Stream& stream);
  /// Records a start event. Throws ValueError when already started.
  void start();
  /// Records the end event of the interval begun by start(). Throws ValueError when not started.
  void stop();
  bool running() const { return running_; }
  /// Finished intervals so far.
  size_t count() const { return ends_.size(); }
  /// Milliseconds of each finished interval (waits for the last end event).
  std::vector<double> times_ms() const;
  /// Sum of times_ms().
  double elapsed_ms() const;
  /// Forgets every interval.
  void reset();
  Device device() const { return device_; }

 private:
  Device device_;
  std::optional<Stream> stream_;  // fixed stream, or none: the current stream at start()
  std::optional<Stream> active_;  // stream of the running interval
  std::vector<Event> starts_, ends_;
  bool running_ = false;
};

/// RAII: timer.start() now, timer.stop() at the end of the scope. Not copyable.
class ScopedTimer {
 public:
  explicit ScopedTimer(Timer& timer);
  /// Stops the timer; may throw a CUDA error from recording the event, unless the scope is being left by an exception.
  ~ScopedTimer() noexcept(false);
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Timer& timer_;
  int uncaught_;
};

}  // namespace kiln
