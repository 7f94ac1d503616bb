// kiln::bench and kiln::Timer (include/kiln/bench.hpp). Device-neutral: GPU
// timing goes through Event and synchronize(); the GPUs a function uses are
// found through the per-thread mark backends set when they queue work
// (core/sync_debug.hpp).
#include "kiln/bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <numeric>
#include <utility>

#include "core/sync_debug.hpp"
#include "kiln/array.hpp"
#include "kiln/error.hpp"
#include "kiln/json.hpp"
#include "kiln/ops.hpp"

namespace kiln {

Stats summarize(std::vector<double> samples) {
  Stats s;
  s.count = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.min = samples.front();
  s.max = samples.back();
  s.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(n);
  double ss = 0;
  for (double x : samples) ss += (x - s.mean) * (x - s.mean);
  s.stddev = std::sqrt(ss / static_cast<double>(n));
  return s;
}

Stats BenchResult::device(Device d) const {
  for (const DeviceTimes& t : device_seconds)
    if (t.device == d) return summarize(t.seconds);
  std::string timed;
  for (const DeviceTimes& t : device_seconds) timed += (timed.empty() ? "" : ", ") + t.device.str();
  throw ValueError("BenchResult::device: " + d.str() + " was not timed (timed GPUs: " +
                   (timed.empty() ? std::string("none") : timed) + "); list it in BenchOptions::devices");
}

double BenchResult::seconds() const {
  if (!device_seconds.empty()) return summarize(device_seconds.front().seconds).median;
  return host().median;
}

namespace {

std::string stats_us(const char* label, const Stats& s) {
  char buf[160];
  // The median is the figure (as seconds() and docs/measuring.md say); the spread follows it.
  std::snprintf(buf, sizeof buf, "%s: median %11.3f us (min %.3f, max %.3f, std %.3f us)", label, s.median * 1e6,
                s.min * 1e6, s.max * 1e6, s.stddev * 1e6);
  return buf;
}


std::string series_json(const std::vector<double>& seconds) {
  Stats s = summarize(seconds);
  std::string out = "{\"seconds\": [";
  for (size_t i = 0; i < seconds.size(); ++i) out += (i ? ", " : "") + json_number(seconds[i]);
  out += "], \"min\": " + json_number(s.min) + ", \"median\": " + json_number(s.median) + ", \"mean\": " + json_number(s.mean) +
         ", \"max\": " + json_number(s.max) + ", \"stddev\": " + json_number(s.stddev) + "}";
  return out;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Bytes to write to push the host's data out of its last-level cache: twice its size (32 MiB when unknown).
int64_t host_flush_bytes() {
  long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
  l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  return 2 * std::max<int64_t>(l3 > 0 ? l3 : 0, int64_t{16} << 20);
}

}  // namespace

std::string BenchResult::str() const {
  char head[64];
  std::snprintf(head, sizeof head, "%-20s:", name.empty() ? "bench" : name.c_str());
  std::string out = head + std::string("    ") + stats_us("host", host());
  for (const DeviceTimes& t : device_seconds) out += "     " + stats_us(t.device.str().c_str(), summarize(t.seconds));
  return out;
}

std::string BenchResult::json() const {
  std::string out = "{\"name\": " + json_quote(name) + ", \"warmup\": " + std::to_string(warmup) +
                    ", \"repeat\": " + std::to_string(repeats()) + ", \"host\": " + series_json(host_seconds) +
                    ", \"devices\": [";
  for (size_t i = 0; i < device_seconds.size(); ++i) {
    std::string s = series_json(device_seconds[i].seconds);
    out += (i ? ", " : "") + std::string("{\"device\": ") + json_quote(device_seconds[i].device.str()) + ", " + s.substr(1);
  }
  return out + "]}";
}

BenchResult bench(const std::function<void()>& fn, BenchOptions options) {
  if (!fn) throw ValueError("bench: the function is empty; pass a callable");
  if (options.warmup < 0 || options.repeat < 1 || !(options.max_seconds > 0))
    throw ValueError(
        "bench: needs warmup >= 0, repeat >= 1 and max_seconds > 0, got warmup=" + std::to_string(options.warmup) +
        ", repeat=" + std::to_string(options.repeat) + ", max_seconds=" + std::to_string(options.max_seconds));
  std::vector<Device> gpus;
  for (const Device& d : options.devices) {
    if (d.is_cpu()) continue;
    (void)gpu(d.index);  // throws DeviceError naming a missing GPU
    if (std::find(gpus.begin(), gpus.end(), d) == gpus.end()) gpus.push_back(d);
  }

  // Warm-up, noting the GPUs fn queues work on (the outer mark is restored afterwards, so nested
  // bench calls and the caller's own tracking are undisturbed).
  const uint64_t outer = std::exchange(detail::t_gpus_touched, uint64_t{0});
  try {
    for (int i = 0; i < options.warmup; ++i) fn();
  } catch (...) {
    detail::t_gpus_touched |= outer;
    throw;
  }
  const uint64_t touched = std::exchange(detail::t_gpus_touched, outer | detail::t_gpus_touched);
  if (options.devices.empty()) {
    const int n = num_gpus();
    for (int i = 0; i < n && i < 64; ++i)
      if (options.warmup == 0 || (touched >> i) & 1) gpus.push_back(gpu(i));
  }
  for (const Device& d : gpus) synchronize(d);  // the warm-up's work is not timed

  std::vector<Array> flush;
  if (options.flush_l2) {
    if (gpus.empty()) {
      flush.push_back(empty({host_flush_bytes() / 4}, float32, cpu()));
    } else {
      for (const Device& d : gpus) {
        auto l2 = static_cast<int64_t>(device_properties(d).l2_cache_bytes);
        flush.push_back(empty({2 * std::max<int64_t>(l2, int64_t{8} << 20) / 4}, float32, d));
      }
    }
  }

  BenchResult result;
  result.name = options.name;
  result.warmup = options.warmup;
  result.host_seconds.reserve(static_cast<size_t>(options.repeat));
  std::vector<Event> starts, ends;
  for (const Device& d : gpus) {
    starts.push_back(Event::create(d));
    ends.push_back(Event::create(d));
    result.device_seconds.push_back({d, {}});
  }
  const double begin = now_s();
  for (int r = 0; r < options.repeat; ++r) {
    if (!flush.empty()) {
      for (Array& f : flush) f.fill(static_cast<double>(r));
      for (const Device& d : gpus) synchronize(d);
    }
    const double t0 = now_s();
    for (Event& e : starts) e.record();
    fn();
    for (Event& e : ends) e.record();
    for (const Device& d : gpus) synchronize(d);  // every stream of the GPU, not only the timed one
    const double t1 = now_s();
    result.host_seconds.push_back(t1 - t0);
    for (size_t i = 0; i < gpus.size(); ++i)
      result.device_seconds[i].seconds.push_back(static_cast<double>(starts[i].elapsed_ms(ends[i])) / 1e3);
    if (t1 - begin >= options.max_seconds) break;
  }
  return result;
}

BenchResult bench(const std::string& name, const std::function<void()>& fn, BenchOptions options) {
  options.name = name;
  return bench(fn, std::move(options));
}

Timer::Timer(Device device) : device_(device) {
  if (device.is_cuda()) (void)gpu(device.index);  // throws DeviceError naming a missing GPU
}

Timer::Timer(const Stream& stream) : device_(stream.device()), stream_(stream) {}

void Timer::start() {
  if (running_) throw ValueError("Timer::start: the timer is already running; call stop() first");
  Stream s = stream_ ? *stream_ : Stream::current(device_);
  Event e = Event::create(device_);
  e.record(s);
  starts_.push_back(std::move(e));
  active_ = s;
  running_ = true;
}

void Timer::stop() {
  if (!running_) throw ValueError("Timer::stop: the timer is not running; call start() first");
  Event e = Event::create(device_);
  e.record(*active_);
  ends_.push_back(std::move(e));
  running_ = false;
  active_.reset();
}

std::vector<double> Timer::times_ms() const {
  std::vector<double> out;
  out.reserve(ends_.size());
  for (size_t i = 0; i < ends_.size(); ++i) out.push_back(static_cast<double>(starts_[i].elapsed_ms(ends_[i])));
  return out;
}

double Timer::elapsed_ms() const {
  std::vector<double> t = times_ms();
  return std::accumulate(t.begin(), t.end(), 0.0);
}

void Timer::reset() {
  starts_.clear();
  ends_.clear();
  running_ = false;
  active_.reset();
}

ScopedTimer::ScopedTimer(Timer& timer) : timer_(timer), uncaught_(std::uncaught_exceptions()) { timer_.start(); }

ScopedTimer::~ScopedTimer() noexcept(false) {
  if (std::uncaught_exceptions() > uncaught_) {
    try {
      timer_.stop();
    } catch (...) {  // already unwinding: a second exception would terminate
    }
    return;
  }
  timer_.stop();
}

}  // namespace kiln
