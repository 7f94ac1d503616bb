// kiln::profiler's GPU side: the detail::ActivityTracer over CUPTI's Activity API. Records kernels
// (concurrent kernel records, so kernels of different streams keep their real overlap), copies, memsets and
// the host's launch, copy, memset and synchronisation calls of the runtime and driver APIs. CUPTI hands
// records over in buffers from its own thread; they are parsed as they come and moved into the Profile at
// stop(). Built without KILN_HAVE_CUPTI (CMake found no CUDA::cupti), the tracer says so instead.
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/profiler_tracer.hpp"
#include "cuda/runtime.hpp"
#include "kiln/error.hpp"

#ifdef KILN_HAVE_CUPTI
#include <cupti.h>
#include <cxxabi.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>
#endif

namespace kiln::cuda_impl {
namespace {

#ifdef KILN_HAVE_CUPTI

[[noreturn]] void throw_cupti(CUptiResult r, const char* call) {
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  std::string fix;
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || r == CUPTI_ERROR_NOT_COMPATIBLE)
    fix = "; another profiler (Nsight Systems/Compute, a CUPTI client) holds CUPTI: run without it";
  else if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    fix = "; the driver restricts GPU profiling to administrators (NVreg_RestrictProfilingToAdminUsers=0 lifts it)";
  throw DeviceError(std::string("kiln::profiler: ") + call + " failed: " + (text ? text : "unknown CUPTI error") + fix);
}

#define KILN_CUPTI_CHECK(expr)                                 \
  do {                                                         \
    CUptiResult kiln_r_ = (expr);                              \
    if (kiln_r_ != CUPTI_SUCCESS) throw_cupti(kiln_r_, #expr); \
  } while (0)

// The calls whose host time the profile keeps: where launch overhead and waiting show.
bool kept_api(std::string_view name) {
  for (std::string_view part : {"Launch", "Memcpy", "Memset", "Synchronize"})
    if (name.find(part) != std::string_view::npos) return true;
  return false;
}

// CUPTI names runtime calls with their version ("cudaLaunchKernel_v7000"): the profile shows the call's name.
std::string api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const char* raw = nullptr;
  if (cuptiGetCallbackName(domain, cbid, &raw) != CUPTI_SUCCESS || !raw) return {};
  std::string name(raw);
  const size_t v = name.rfind("_v");
  if (v != std::string::npos && v + 2 < name.size() && name.find_first_not_of("0123456789", v + 2) == std::string::npos)
    name.resize(v);
  return name;
}

std::string demangle(const char* name) {
  if (!name) return "(unnamed kernel)";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

const char* copy_kind(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
      return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "PtoP";
    default:
      return "unknown";
  }
}

constexpr size_t kBufferBytes = size_t{8} << 20;  // CUPTI's suggested size; few flushes in a training step
constexpr size_t kBufferAlign = 8;                // CUPTI's record alignment

class CuptiTracer final : public detail::ActivityTracer {
 public:
  std::string unavailable() override { return {}; }

  void start() override {
    std::call_once(registered_, [] {
      // The OS thread id (gettid), as host ranges record it, so that a launch lands on its range's thread
      // in the trace; CUPTI's default is pthread_self().
      KILN_CUPTI_CHECK(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
      KILN_CUPTI_CHECK(cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed));
    });
    {
      std::lock_guard lock(mutex_);
      pending_ = profiler::Profile{};
      dropped_ = 0;
    }
    try {
      enable(true);
    } catch (...) {
      enable(false);  // a refused kind must not leave the others recording into no session
      throw;
    }
  }

  void synchronize() override {
    // The profiler's own waits are not the program's: their API records are dropped at stop().
    sync_thread_ = static_cast<uint32_t>(::syscall(SYS_gettid));
    sync_start_ = timestamp_ns();
    int previous = 0;  // this thread's device as CUDA sees it (0 when nothing chose one), restored after
    KILN_CUDA_CHECK(cudaGetDevice(&previous));
    for (int d = 0; d < device_count(); ++d) {
      set_device(d);
      KILN_CUDA_CHECK(cudaDeviceSynchronize());
    }
    set_device(previous);
  }

  void stop(profiler::Profile& out) override {
    // Completed buffers first, then the disabled kinds' last partial buffers (forced).
    cuptiActivityFlushAll(0);
    enable(false);
    KILN_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    std::lock_guard lock(mutex_);
    const auto append = [](auto& to, auto& from) {
      to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
    };
    append(out.kernels, pending_.kernels);
    append(out.transfers, pending_.transfers);
    std::erase_if(pending_.api_calls,
                  [&](const profiler::ApiRecord& a) { return a.thread == sync_thread_ && a.start_ns >= sync_start_; });
    append(out.api_calls, pending_.api_calls);
    if (dropped_ > 0)
      out.gpu_note += (out.gpu_note.empty() ? "" : "; ") + std::to_string(dropped_) +
                      " GPU records dropped by CUPTI (its buffers filled): profile a shorter stretch";
    pending_ = profiler::Profile{};
  }

  int64_t timestamp_ns() override {
    uint64_t t = 0;
    cuptiGetTimestamp(&t);
    return static_cast<int64_t>(t);
  }

  static CuptiTracer& instance() {
    static CuptiTracer t;
    return t;
  }

 private:
  void enable(bool on) {
    const auto set = [on](CUpti_ActivityKind kind) {
      if (on)
        KILN_CUPTI_CHECK(cuptiActivityEnable(kind));
      else
        cuptiActivityDisable(kind);  // best effort: stop() must still hand over what was recorded
    };
    set(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    set(CUPTI_ACTIVITY_KIND_MEMCPY);
    set(CUPTI_ACTIVITY_KIND_MEMSET);
    enable_api_calls(on);
  }

  // Only the kept calls are enabled (per-call switches), so a step of thousands of cudaGetDevice and
  // cuCtxGetCurrent calls costs nothing extra; CUPTIs without the switches record every call, filtered when
  // parsed.
  void enable_api_calls(bool on) {
    std::call_once(api_ids_found_, [this] {
      for (CUpti_CallbackId id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id)
        if (kept_api(api_name(CUPTI_CB_DOMAIN_DRIVER_API, id))) driver_ids_.push_back(id);
      for (CUpti_CallbackId id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id)
        if (kept_api(api_name(CUPTI_CB_DOMAIN_RUNTIME_API, id))) runtime_ids_.push_back(id);
    });
    bool fine_grained = true;
    for (CUpti_CallbackId id : driver_ids_) fine_grained &= cuptiActivityEnableDriverApi(id, on) == CUPTI_SUCCESS;
    for (CUpti_CallbackId id : runtime_ids_) fine_grained &= cuptiActivityEnableRuntimeApi(id, on) == CUPTI_SUCCESS;
    if (on && !fine_grained) {
      KILN_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
      KILN_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
      whole_api_kinds_ = true;
    } else if (!on && whole_api_kinds_) {
      cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
      cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
      whole_api_kinds_ = false;
    }
  }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
  }

  static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
    instance().parse(context, stream, buffer, valid);
    std::free(buffer);
  }

  // Runs on CUPTI's thread or inside cuptiActivityFlushAll; never throws into CUPTI.
  void parse(CUcontext context, uint32_t stream, uint8_t* buffer, size_t valid) noexcept {
    try {
      std::lock_guard lock(mutex_);
      CUpti_Activity* record = nullptr;
      while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) add(record);
      size_t dropped = 0;
      if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS) dropped_ += dropped;
    } catch (...) {
      ++dropped_;  // out of memory while copying names: the profile says records are missing
    }
  }

  void add(const CUpti_Activity* record) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        profiler::KernelRecord r;
        r.name = demangle(k->name);
        r.start_ns = static_cast<int64_t>(k->start);
        r.end_ns = static_cast<int64_t>(k->end);
        r.device = static_cast<int>(k->deviceId);
        r.stream = k->streamId;
        r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
        r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
        r.correlation = k->correlationId;
        pending_.kernels.push_back(std::move(r));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        pending_.transfers.push_back({copy_kind(m->copyKind), static_cast<int64_t>(m->bytes),
                                      static_cast<int64_t>(m->start), static_cast<int64_t>(m->end),
                                      static_cast<int>(m->deviceId), m->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        pending_.transfers.push_back({"memset", static_cast<int64_t>(m->bytes), static_cast<int64_t>(m->start),
                                      static_cast<int64_t>(m->end), static_cast<int>(m->deviceId), m->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_DRIVER:
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        const auto domain =
            record->kind == CUPTI_ACTIVITY_KIND_DRIVER ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
        const uint64_t key = (uint64_t{domain} << 32) | a->cbid;
        auto it = names_.find(key);
        if (it == names_.end()) it = names_.emplace(key, api_name(domain, a->cbid)).first;
        if (!kept_api(it->second)) break;
        pending_.api_calls.push_back(
            {it->second, static_cast<int64_t>(a->start), static_cast<int64_t>(a->end), a->threadId, a->correlationId});
        break;
      }
      default:
        break;
    }
  }

  std::once_flag registered_, api_ids_found_;
  std::vector<CUpti_CallbackId> driver_ids_, runtime_ids_;
  bool whole_api_kinds_ = false;
  uint32_t sync_thread_ = 0;
  int64_t sync_start_ = 0;
  std::mutex mutex_;  // guards what the buffers fill (CUPTI's thread) and stop() reads
  profiler::Profile pending_;
  size_t dropped_ = 0;
  std::unordered_map<uint64_t, std::string> names_;
};

detail::ActivityTracer& make_tracer() { return CuptiTracer::instance(); }

#else  // no CUPTI in this build

class NoCuptiTracer final : public detail::ActivityTracer {
 public:
  std::string unavailable() override {
    return "this kiln was built without CUPTI (CMake's CUDA::cupti was not found); install the CUDA toolkit's "
           "CUPTI (e.g. the cuda-cupti-dev-<version> package, or extras/CUPTI of a runfile install) and "
           "configure and build kiln again";
  }
  // Never called: the profiler asks unavailable() first.
  void start() override {}
  void synchronize() override {}
  void stop(profiler::Profile&) override {}
  int64_t timestamp_ns() override { return 0; }
};

detail::ActivityTracer& make_tracer() {
  static NoCuptiTracer t;
  return t;
}

#endif

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::detail {
ActivityTracer& cuda_activity_tracer() { return cuda_impl::make_tracer(); }
}  // namespace kiln::detail
