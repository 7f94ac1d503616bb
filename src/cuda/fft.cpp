// GPU Fourier transforms with cuFFT (CudaBackend::fft). One call is one cufftXtMakePlanMany plan (64-bit sizes)
// over the operands' own layout when it has cuFFT's "advanced" form: the transformed axes nested with one element
// stride, every other axis merged into one batch stride, in the input and the output alike; other layouts are
// refused, and the core passes its canonical one (C-contiguous, transformed axes last). Plans are cached per
// device, as CuPy's plan cache: a least-recently-used list of kPlansPerDevice plans keyed by (kind, precision,
// sizes, layout). Each run binds the plan to the device's current stream (cufftSetStream) and to a work area from
// kiln's caching allocator on that stream (auto-allocation off), so the work stays stream-ordered and counts in
// kiln's memory statistics. A plan is destroyed only after the work it last queued is done (an event).
#include <cuda_runtime.h>
#include <cufft.h>
#include <cufftXt.h>

#include <algorithm>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "kiln/error.hpp"
#include "kiln/ops.hpp"

namespace kiln::cuda_impl {
namespace {

using detail::FftCall;
using detail::FftKind;

/// Plans kept per device (CuPy's default plan cache holds 16).
constexpr size_t kPlansPerDevice = 16;

const char* result_name(cufftResult r) {
  switch (r) {
    case CUFFT_INVALID_PLAN:
      return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED:
      return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE:
      return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE:
      return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR:
      return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED:
      return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED:
      return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE:
      return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA:
      return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE:
      return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE:
      return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED:
      return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED:
      return "CUFFT_NOT_SUPPORTED";
    default:
      return "cuFFT error";
  }
}

/// Throws CudaError naming the call, the status and the device unless `r` is success.
void cufft_check(cufftResult r, const char* call, int device) {
  if (r != CUFFT_SUCCESS)
    throw CudaError(std::string("fft: ") + call + " failed on cuda:" + std::to_string(device) + " (" + result_name(r) +
                    ", status " + std::to_string(static_cast<int>(r)) +
                    "); kiln::fft also runs on the CPU: move the array with .to(kiln::cpu())");
}
#define KILN_CUFFT(expr, device) cufft_check((expr), #expr, device)

/// One cuFFT plan and the event after its last queued run; destroyed once that run is done.
struct CufftPlan {
  cufftHandle handle = 0;
  cudaEvent_t last_run = nullptr;
  size_t work_bytes = 0;
  int device = 0;
  std::mutex use;  ///< a plan's stream and work area are its own state: one run at a time binds them
  CufftPlan() = default;
  CufftPlan(const CufftPlan&) = delete;
  CufftPlan& operator=(const CufftPlan&) = delete;
  ~CufftPlan() {
    if (last_run) {
      cudaEventSynchronize(last_run);
      cudaEventDestroy(last_run);
    }
    cufftDestroy(handle);
  }
};

/// The layout of one call in cuFFT's advanced form; `fits` is false when the operands have none.
struct Layout {
  bool fits = false;
  std::vector<long long> n, inembed, onembed;
  long long istride = 1, ostride = 1, idist = 1, odist = 1, batch = 1;
};

/// The embedding of the transformed axes of one operand: stride of the last axis, and for each outer axis the
/// ratio of its stride to the next one's (which must be a whole number, at least the next axis' extent).
bool embed(const Array& a, const std::vector<int64_t>& axes, std::vector<long long>& nembed, long long& stride) {
  const size_t k = axes.size();
  stride = a.strides()[static_cast<size_t>(axes[k - 1])];
  if (stride <= 0) return false;
  nembed.assign(k, 0);
  nembed[0] = a.shape(axes[0]);
  for (size_t i = 0; i + 1 < k; ++i) {
    const int64_t outer = a.strides()[static_cast<size_t>(axes[i])];
    const int64_t inner = a.strides()[static_cast<size_t>(axes[i + 1])];
    if (inner <= 0 || outer % inner != 0 || outer / inner < a.shape(axes[i + 1])) return false;
    nembed[i + 1] = outer / inner;
  }
  return true;
}

Layout layout_of(const FftCall& call) {
  Layout l;
  const Array& in = *call.in;
  const Array& out = call.out;
  if (call.axes.empty() || call.axes.size() > 3) return l;
  for (int64_t axis : call.axes) l.n.push_back(call.kind == FftKind::C2R ? out.shape(axis) : in.shape(axis));
  if (!embed(in, call.axes, l.inembed, l.istride) || !embed(out, call.axes, l.onembed, l.ostride)) return l;
  // The other axes must merge into one batch axis with one stride in each operand.
  std::vector<int64_t> others;
  for (int64_t axis = 0; axis < out.ndim(); ++axis)
    if (out.shape(axis) > 1 && std::find(call.axes.begin(), call.axes.end(), axis) == call.axes.end())
      others.push_back(axis);
  if (!others.empty()) {
    for (size_t i = 0; i + 1 < others.size(); ++i) {
      const auto a = static_cast<size_t>(others[i]), b = static_cast<size_t>(others[i + 1]);
      if (in.strides()[a] != in.strides()[b] * in.shape()[b] || out.strides()[a] != out.strides()[b] * out.shape()[b])
        return l;
    }
    const auto inner = static_cast<size_t>(others.back());
    l.idist = in.strides()[inner];
    l.odist = out.strides()[inner];
    if (l.idist <= 0 || l.odist <= 0) return l;
    for (int64_t axis : others) l.batch *= out.shape(axis);
  }
  l.fits = true;
  return l;
}

struct Types {
  cudaDataType in, out, exec;
};
Types types_of(const FftCall& call) {
  const bool single = (call.kind == FftKind::C2R ? call.out.dtype() : real_dtype(call.in->dtype())) == DType::Float32;
  const cudaDataType real = single ? CUDA_R_32F : CUDA_R_64F, complex = single ? CUDA_C_32F : CUDA_C_64F;
  switch (call.kind) {
    case FftKind::R2C:
      return {real, complex, complex};
    case FftKind::C2R:
      return {complex, real, complex};
    default:
      return {complex, complex, complex};
  }
}

/// The plan cache of every device: most recently used first.
struct PlanCache {
  std::mutex mutex;
  std::vector<std::list<std::pair<std::vector<long long>, std::shared_ptr<CufftPlan>>>> devices;
};
PlanCache& plan_cache() {
  static auto* cache = new PlanCache();  // leaked: no plan is destroyed while the process exits
  return *cache;
}

std::shared_ptr<CufftPlan> plan_for(const FftCall& call, const Layout& l, const Types& t, int device) {
  std::vector<long long> key = {static_cast<long long>(call.kind),
                                static_cast<long long>(t.in),
                                static_cast<long long>(l.n.size()),
                                l.istride,
                                l.ostride,
                                l.idist,
                                l.odist,
                                l.batch};
  for (const auto* list : {&l.n, &l.inembed, &l.onembed}) key.insert(key.end(), list->begin(), list->end());
  std::shared_ptr<CufftPlan> evicted;  // destroyed after the lock is released (it may wait for its last run)
  std::lock_guard<std::mutex> lock(plan_cache().mutex);
  auto& devices = plan_cache().devices;
  if (devices.size() <= static_cast<size_t>(device)) devices.resize(static_cast<size_t>(device) + 1);
  auto& plans = devices[static_cast<size_t>(device)];
  for (auto it = plans.begin(); it != plans.end(); ++it)
    if (it->first == key) {
      plans.splice(plans.begin(), plans, it);
      return plans.front().second;
    }
  RelaxedCaptureMode relaxed;  // planning allocates (cuFFT's twiddle tables)
  auto plan = std::make_shared<CufftPlan>();
  plan->device = device;
  KILN_CUFFT(cufftCreate(&plan->handle), device);
  KILN_CUFFT(cufftSetAutoAllocation(plan->handle, 0), device);
  std::vector<long long> n = l.n, inembed = l.inembed, onembed = l.onembed;
  KILN_CUFFT(cufftXtMakePlanMany(plan->handle, static_cast<int>(n.size()), n.data(), inembed.data(), l.istride, l.idist,
                                 t.in, onembed.data(), l.ostride, l.odist, t.out, l.batch, &plan->work_bytes, t.exec),
             device);
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&plan->last_run, cudaEventDisableTiming));
  plans.emplace_front(std::move(key), plan);
  if (plans.size() > kPlansPerDevice) {
    evicted = std::move(plans.back().second);
    plans.pop_back();
  }
  return plan;
}

}  // namespace

bool cuda_fft(const FftCall& call) {
  const Layout l = layout_of(call);
  if (!l.fits) return false;
  const int device = call.out.device().index;
  set_device(device);
  const Types t = types_of(call);
  const std::shared_ptr<CufftPlan> plan = plan_for(call, l, t, device);
  const cudaStream_t stream = current_stream(device);
  // The work area: stream-ordered memory of kiln's allocator, free again once this stream has run the transform.
  const Array work =
      plan->work_bytes > 0 ? empty({static_cast<int64_t>(plan->work_bytes)}, DType::UInt8, call.out.device()) : Array();
  std::lock_guard<std::mutex> use(plan->use);
  KILN_CUFFT(cufftSetStream(plan->handle, stream), device);
  KILN_CUFFT(cufftSetWorkArea(plan->handle, work.defined() ? work.data_ptr() : nullptr), device);
  KILN_CUFFT(
      cufftXtExec(plan->handle, call.in->data_ptr(), call.out.data_ptr(), call.forward ? CUFFT_FORWARD : CUFFT_INVERSE),
      device);
  KILN_CUDA_CHECK(cudaEventRecord(plan->last_run, stream));
  return true;
}

size_t cuda_fft_cached_plans(int device) {
  std::lock_guard<std::mutex> lock(plan_cache().mutex);
  const auto& devices = plan_cache().devices;
  return static_cast<size_t>(device) < devices.size() ? devices[static_cast<size_t>(device)].size() : 0;
}

}  // namespace kiln::cuda_impl
