// Streams, events, device properties and synchronisation, delegated to the
// device's runtime through opaque handles. CPU events read the host clock:
// CPU work is synchronous, so that is the honest time there.
#include "kiln/stream.hpp"

#include <chrono>
#include <string>
#include <string_view>

#include "core/device_runtime.hpp"
#include "core/sync_debug.hpp"

namespace kiln {

namespace {
detail::DeviceRuntime& runtime_checked(Device d, const char* op) {
  if (d.is_cuda()) {
    try {
      (void)gpu(d.index);
    } catch (const DeviceError& e) {
      throw DeviceError(std::string(op) + ": " + e.what());
    }
  }
  return detail::runtime_for(d);
}
double host_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Stream Stream::create(Device device, StreamOptions options) {
  detail::DeviceRuntime& r = runtime_checked(device, "Stream::create");
  void* h = r.stream_create(device, options);
  std::shared_ptr<void> owner(h, [&r, device](void* p) {
    if (p) r.stream_destroy(device, p);
  });
  return Stream(device, h, std::move(owner));
}

Stream Stream::default_stream(Device device) {
  (void)runtime_checked(device, "Stream::default_stream");
  return Stream(device, nullptr, nullptr);
}

Stream Stream::current(Device device) {
  detail::DeviceRuntime& r = runtime_checked(device, "Stream::current");
  return Stream(device, r.current_stream(device), nullptr);
}

void Stream::synchronize() const {
  if (device_.is_cuda()) detail::note_explicit_sync();
  detail::runtime_for(device_).stream_synchronize(device_, handle_);
}
bool Stream::query() const { return detail::runtime_for(device_).stream_query(device_, handle_); }

std::string Stream::str() const {
  if (!handle_) return "Stream(" + device_.str() + ", default)";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", handle_);
  return "Stream(" + device_.str() + ", " + buf + ")";
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(Stream::current(stream.device())), current_(stream) {
  detail::runtime_for(stream.device()).set_current_stream(stream.device(), stream.handle());
}
StreamGuard::~StreamGuard() {
  detail::runtime_for(previous_.device()).set_current_stream(previous_.device(), previous_.handle());
}

Event Event::create(Device device, bool timing) {
  detail::DeviceRuntime& r = runtime_checked(device, "Event::create");
  void* h = r.event_create(device, timing);
  std::shared_ptr<void> owner(h, [&r, device](void* p) {
    if (p) r.event_destroy(device, p);
  });
  return Event(device, h, std::move(owner), timing);
}

void Event::record() { record(Stream::current(device_)); }

void Event::record(const Stream& stream) {
  if (stream.device() != device_)
    throw DeviceError("Event::record: the event is on " + device_.str() + " but the stream is on " +
                      stream.device().str() + "; create the event on the stream's device");
  detail::runtime_for(device_).event_record(device_, handle_, stream.handle());
  host_time_ms_ = host_ms();
  recorded_ = true;
}

void Event::wait(const Stream& stream) const {
  if (stream.device().is_cpu() || device_.is_cpu()) return;  // CPU work is already complete
  detail::runtime_for(stream.device()).event_wait(stream.device(), handle_, stream.handle());
}

void Event::synchronize() const {
  if (device_.is_cuda()) detail::note_explicit_sync();
  detail::runtime_for(device_).event_synchronize(device_, handle_);
}
bool Event::query() const { return detail::runtime_for(device_).event_query(device_, handle_); }

float Event::elapsed_ms(const Event& end) const {
  if (!recorded_ || !end.recorded_)
    throw ValueError("Event::elapsed_ms: both events must be recorded first (call record() on each)");
  if (!timing_ || !end.timing_)
    throw ValueError("Event::elapsed_ms: an event was created with timing=false; create both with timing enabled");
  if (device_ != end.device_)
    throw DeviceError("Event::elapsed_ms: events on " + device_.str() + " and " + end.device_.str() +
                      " cannot be compared; time each device with its own pair");
  if (device_.is_cpu()) return static_cast<float>(end.host_time_ms_ - host_time_ms_);
  return detail::runtime_for(device_).event_elapsed_ms(device_, handle_, end.handle_);
}

DeviceProperties device_properties(Device device) {
  return runtime_checked(device, "device_properties").properties(device);
}

double peak_bf16_tflops(const DeviceProperties& p) {
  const int arch = p.major * 10 + p.minor;
  int per_sm_clock = 0;  // dense bfloat16 FLOPs per SM and clock
  if (arch == 80)
    per_sm_clock = 2048;
  else if (arch == 86 || arch == 87 || arch == 89)
    per_sm_clock = 1024;
  else if (arch == 90)
    per_sm_clock = 4096;
  else if (arch == 100 || arch == 103)
    per_sm_clock = 8192;
  const auto named = [&](std::string_view part) { return p.name.find(part) != std::string::npos; };
  int mhz = p.clock_mhz;
  if (named("H100") || named("H200"))  // the clock of NVIDIA's datasheet figures, below the reported boost
    mhz = named("NVL") ? 1545 : named("PCIe") ? 1620 : 1830;
  return static_cast<double>(per_sm_clock) * p.multiprocessors * mhz * 1e6 / 1e12;
}

void synchronize(Device device) {
  detail::DeviceRuntime& r = runtime_checked(device, "synchronize");
  if (device.is_cuda()) detail::note_explicit_sync();
  r.synchronize(device);
}

}  // namespace kiln
