// cuDNN engines of Backend::convolution and Backend::batch_norm (core/backend.hpp), through cuDNN's
// descriptor API (cudnnConvolutionForward / BackwardData / BackwardFilter, cudnnBatchNormalization*).
//
// Algorithms: by default cuDNN's heuristics rank the algorithms for a problem (cudnnGet*Algorithm_v7) and the
// first that runs with a workspace kiln can allocate is taken; with kiln::cudnn::set_benchmark(true) every
// algorithm is timed once on the real operands (cudnnFind*AlgorithmEx) and the fastest kept, as
// torch.backends.cudnn.benchmark. Either choice is cached per (device, step, dtype, layout, shapes, geometry,
// math mode); a capture into a CUDA graph never benchmarks (timing synchronises) and uses the heuristics.
// Workspaces come from kiln's caching allocator on the current stream, per call. Float32 may use TF32 tensor
// cores unless kiln::cudnn::set_allow_tf32(false) (then CUDNN_FMA_MATH, as PyTorch); float16/bfloat16 use
// tensor cores and accumulate in float32; float64 runs in float64.
//
// Operands come laid out by the core: NCHW-contiguous, or all channels-last (NHWC memory; the filter then
// in NHWC too). Problems past cuDNN's 32-bit sizes, and batch normalisation with eps below
// CUDNN_BN_MIN_EPSILON, return false: the core runs its reference.
#include <cudnn.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/kernel_memo.hpp"
#include "cuda/handle_pool.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "kiln/conv.hpp"

namespace kiln::cuda_impl {
namespace {

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file, int line) {
  throw DeviceError(std::string("cuDNN: ") + cudnnGetErrorString(status) + " in " + expr + " (" + file + ":" +
                    std::to_string(line) +
                    "); CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr in the environment prints cuDNN's reason");
}

#define KILN_CUDNN_CHECK(expr)                                                       \
  do {                                                                               \
    cudnnStatus_t kiln_status_ = (expr);                                             \
    if (kiln_status_ != CUDNN_STATUS_SUCCESS)                                        \
      ::kiln::cuda_impl::throw_cudnn_error(kiln_status_, #expr, __FILE__, __LINE__); \
  } while (0)

struct ConvKey {
  int device = 0;
  detail::ConvKind kind = detail::ConvKind::Forward;
  DType dtype = DType::Float32;
  bool channels_last = false;
  bool tf32 = false;
  bool benchmark = false;
  std::array<int64_t, 4> x{}, w{}, y{};  // the input side (x or dx), the filter (w or dw), the output side
  std::array<int64_t, 2> stride{}, padding{}, dilation{};
  int64_t groups = 1;
  int64_t alignment = 16;  ///< the operands' common byte alignment (a backend plan assumes it), at most 16
  bool operator==(const ConvKey&) const = default;
};

}  // namespace
}  // namespace kiln::cuda_impl

KILN_HASH_EVERY_FIELD(kiln::cuda_impl::ConvKey, device, kind, dtype, channels_last, tf32, benchmark, x, w, y, stride,
                      padding, dilation, groups, alignment);

namespace kiln::cuda_impl {
namespace {

struct ConvPlan;

struct CudnnState {
  cudnnHandle_t handle = nullptr;
  /// Execution plans of the backend API made with this handle, per problem; a null plan: the backend API
  /// has none for the problem (the descriptor API runs it).
  std::unordered_map<ConvKey, std::shared_ptr<ConvPlan>> plans;
  std::string refusal;  ///< why the last problem without a plan has none
};

CudnnState* create_state() {
  auto state = std::make_unique<CudnnState>();
  KILN_CUDNN_CHECK(cudnnCreate(&state->handle));
  return state.release();
}

/// This thread's cuDNN state of `device` (the current device), its handle bound to `stream`.
CudnnState* bound_state(int device, cudaStream_t stream) {
  CudnnState* state = thread_handle<CudnnState>(device, create_state);
  KILN_CUDNN_CHECK(cudnnSetStream(state->handle, stream));
  return state;
}
cudnnHandle_t bound_handle(int device, cudaStream_t stream) { return bound_state(device, stream)->handle; }

template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { KILN_CUDNN_CHECK(Create(&desc_)); }
  ~Descriptor() { (void)Destroy(desc_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  operator T() const { return desc_; }

 private:
  T desc_ = nullptr;
};
using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

std::optional<cudnnDataType_t> data_type(DType t) {
  switch (t) {
    case DType::Float32:
      return CUDNN_DATA_FLOAT;
    case DType::Float64:
      return CUDNN_DATA_DOUBLE;
    case DType::Float16:
      return CUDNN_DATA_HALF;
    case DType::BFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return std::nullopt;
  }
}

/// Whether every size of a 4-d array fits cuDNN's int (elements included).
bool fits_int(const Array& a) {
  return a.size() < INT_MAX && a.shape(0) < INT_MAX && a.shape(1) < INT_MAX && a.shape(2) < INT_MAX &&
         a.shape(3) < INT_MAX;
}

/// The packed strides of (N, C, H, W) `shape` in NCHW or NHWC memory (the core lays operands out so).
void set_tensor(const TensorDesc& desc, const Shape& s, cudnnDataType_t type, bool channels_last) {
  const int n = static_cast<int>(s[0]), c = static_cast<int>(s[1]), h = static_cast<int>(s[2]),
            w = static_cast<int>(s[3]);
  const int dims[4] = {n, c, h, w};
  const int nchw[4] = {c * h * w, h * w, w, 1};
  const int nhwc[4] = {h * w * c, 1, w * c, c};
  KILN_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc, type, 4, dims, channels_last ? nhwc : nchw));
}

/// Scaling factors: double for float64 data, float otherwise.
struct Scale {
  float f1 = 1.0f, f0 = 0.0f;
  double d1 = 1.0, d0 = 0.0;
  bool dbl = false;
  const void* one() const { return dbl ? static_cast<const void*>(&d1) : static_cast<const void*>(&f1); }
  const void* zero() const { return dbl ? static_cast<const void*>(&d0) : static_cast<const void*>(&f0); }
};

// ---------------------------------------------------------------- convolution algorithms

struct AlgoChoice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

class AlgoCache {
 public:
  static AlgoCache& instance() {
    static AlgoCache* cache = new AlgoCache;  // leaked: used until the process ends
    return *cache;
  }
  std::optional<AlgoChoice> find(const ConvKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void insert(const ConvKey& key, const AlgoChoice& choice) {
    std::lock_guard<std::mutex> lock(mutex_);
    map_.emplace(key, choice);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<ConvKey, AlgoChoice> map_;
};

/// Everything one convolution step needs: descriptors, pointers, the handle.
struct ConvProblem {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  TensorDesc x, y;  // the input side (x, or dx) and the output side (y, or dy)
  FilterDesc w;     // w, or dw
  ConvDesc conv;
  const void* x_ptr = nullptr;   // Forward, BackwardWeight
  const void* w_ptr = nullptr;   // Forward, BackwardInput
  const void* dy_ptr = nullptr;  // BackwardInput, BackwardWeight
  void* out_ptr = nullptr;       // y, dx or dw
};

/// The algorithm lists of one step kind, in cuDNN's perf-result form (algo, status, time, memory, mathType).
struct Candidate {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnMathType_t math;
};

template <class Perf>
std::vector<Candidate> candidates(const Perf* perf, int count) {
  std::vector<Candidate> out;
  for (int i = 0; i < count; ++i)
    out.push_back({static_cast<int>(perf[i].algo), perf[i].status, perf[i].memory, perf[i].mathType});
  return out;
}

std::vector<Candidate> heuristics(detail::ConvKind kind, const ConvProblem& p) {
  switch (kind) {
    case detail::ConvKind::Forward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
      int n = 0;
      KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(p.handle, p.x, p.w, p.conv, p.y,
                                                              static_cast<int>(perf.size()), &n, perf.data()));
      return candidates(perf.data(), n);
    }
    case detail::ConvKind::BackwardInput: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
      int n = 0;
      // here p.x describes dx (the output) and p.y dy
      KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(p.handle, p.w, p.y, p.conv, p.x,
                                                                   static_cast<int>(perf.size()), &n, perf.data()));
      return candidates(perf.data(), n);
    }
    case detail::ConvKind::BackwardWeight: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
      int n = 0;
      KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(p.handle, p.x, p.y, p.conv, p.w,
                                                                     static_cast<int>(perf.size()), &n, perf.data()));
      return candidates(perf.data(), n);
    }
  }
  return {};
}

/// Times every algorithm on the problem's operands (its output is overwritten), fastest first.
std::vector<Candidate> timed(detail::ConvKind kind, const ConvProblem& p, void* workspace, size_t bytes) {
  switch (kind) {
    case detail::ConvKind::Forward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
      int n = 0;
      KILN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(p.handle, p.x, p.x_ptr, p.w, p.w_ptr, p.conv, p.y,
                                                              p.out_ptr, static_cast<int>(perf.size()), &n, perf.data(),
                                                              workspace, bytes));
      return candidates(perf.data(), n);
    }
    case detail::ConvKind::BackwardInput: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
      int n = 0;
      KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(p.handle, p.w, p.w_ptr, p.y, p.dy_ptr, p.conv, p.x,
                                                                   p.out_ptr, static_cast<int>(perf.size()), &n,
                                                                   perf.data(), workspace, bytes));
      return candidates(perf.data(), n);
    }
    case detail::ConvKind::BackwardWeight: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
      int n = 0;
      KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(p.handle, p.x, p.x_ptr, p.y, p.dy_ptr, p.conv, p.w,
                                                                     p.out_ptr, static_cast<int>(perf.size()), &n,
                                                                     perf.data(), workspace, bytes));
      return candidates(perf.data(), n);
    }
  }
  return {};
}

/// Workspace memory from the caching allocator, or null when it cannot be had (the next algorithm is tried).
std::shared_ptr<Storage> try_workspace(int device, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  try {
    return device_alloc(device, bytes, stream);
  } catch (const OutOfMemoryError&) {
    return nullptr;
  }
}

// ---------------------------------------------------------------- the backend (graph) API's plans
//
// cuDNN 9 implements the descriptor API on its backend API and keeps one execution plan, the previous call's:
// a network of many convolution shapes builds a plan on every call (tens to hundreds of microseconds of host
// time each). kiln builds one plan per problem through the backend API and keeps it (per thread and device,
// with the handle it was made with), so a repeated convolution costs a lookup, a variant pack and
// cudnnBackendExecute, as PyTorch's cuDNN frontend path. A problem the backend API has no plan for (or any
// failure while building one) runs through the descriptor API above; KILN_CUDNN_LEGACY=1 forces that path.

std::atomic<bool>& legacy_flag() {
  static std::atomic<bool> legacy = [] {
    const char* v = std::getenv("KILN_CUDNN_LEGACY");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return legacy;
}
bool legacy_only() { return legacy_flag().load(std::memory_order_relaxed); }

/// One backend descriptor, destroyed with its owner. Setters throw DeviceError (caught by plan building).
class BackendDesc {
 public:
  explicit BackendDesc(cudnnBackendDescriptorType_t type) { KILN_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~BackendDesc() {
    if (d_ != nullptr) (void)cudnnBackendDestroyDescriptor(d_);
  }
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    KILN_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
  }
  void set_desc(cudnnBackendAttributeName_t name, const BackendDesc& value) {
    cudnnBackendDescriptor_t raw = value.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void set_int(cudnnBackendAttributeName_t name, int64_t value) { set(name, CUDNN_TYPE_INT64, 1, &value); }
  void set_ints(cudnnBackendAttributeName_t name, const int64_t* values, int64_t count) {
    set(name, CUDNN_TYPE_INT64, count, values);
  }
  void finalize() { KILN_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The handle attributes are deprecated in cuDNN 9.19 (execution takes the handle) and required before it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';

/// A finalized execution plan and the descriptors it was made from (kept alive with it).
struct ConvPlan {
  std::vector<std::unique_ptr<BackendDesc>> parts;  // tensors, convolution, operation, graph, engine config
  std::unique_ptr<BackendDesc> plan;
  int64_t workspace = 0;
};

/// The operands' uids in variant-pack order and their pointers for one call.
struct ConvPointers {
  std::array<int64_t, 3> uids{};
  std::array<void*, 3> ptrs{};
};

ConvPointers conv_pointers(const detail::ConvCall& call) {
  const auto ptr = [](const void* p) { return const_cast<void*>(p); };
  switch (call.kind) {
    case detail::ConvKind::Forward:
      return {{kUidX, kUidW, kUidY}, {ptr(call.x->data_ptr()), ptr(call.w->data_ptr()), call.out.data_ptr()}};
    case detail::ConvKind::BackwardInput:
      return {{kUidX, kUidW, kUidY}, {call.out.data_ptr(), ptr(call.w->data_ptr()), ptr(call.dy->data_ptr())}};
    case detail::ConvKind::BackwardWeight:
      return {{kUidX, kUidW, kUidY}, {ptr(call.x->data_ptr()), call.out.data_ptr(), ptr(call.dy->data_ptr())}};
  }
  return {};
}

/// The largest power of two up to 16 that divides every operand's address.
int64_t common_alignment(const ConvPointers& p) {
  int64_t align = 16;
  for (void* ptr : p.ptrs)
    while (align > 1 && reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

std::unique_ptr<BackendDesc> backend_tensor(int64_t uid, const std::array<int64_t, 4>& dims, cudnnDataType_t type,
                                            bool channels_last, int64_t alignment) {
  auto t = std::make_unique<BackendDesc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t c = dims[1], h = dims[2], w = dims[3];
  const int64_t nchw[4] = {c * h * w, h * w, w, 1};
  const int64_t nhwc[4] = {h * w * c, 1, w * c, c};
  t->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  t->set_ints(CUDNN_ATTR_TENSOR_DIMENSIONS, dims.data(), 4);
  t->set_ints(CUDNN_ATTR_TENSOR_STRIDES, channels_last ? nhwc : nchw, 4);
  t->set_int(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
  t->set_int(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, alignment);
  t->finalize();
  return t;
}

/// The engine configurations cuDNN's heuristics (`mode`) rank for `graph`, best first.
std::vector<std::unique_ptr<BackendDesc>> heuristic_configs(const BackendDesc& graph, cudnnBackendHeurMode_t mode) {
  BackendDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heur.finalize();
  int64_t count = 0;
  KILN_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                            &count, nullptr));
  std::vector<std::unique_ptr<BackendDesc>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_unique<BackendDesc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  int64_t got = 0;
  if (count > 0)
    KILN_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              count, &got, raw.data()));
  configs.resize(static_cast<size_t>(std::min(got, count)));
  return configs;
}

/// Whether an engine configuration computes as kiln promises: no TF32 for float32 when it is off, never
/// inputs converted down (as PyTorch filters), and (when `compiled_ok` is false) no engine compiled at run time.
bool acceptable(const BackendDesc& config, DType dtype, bool tf32, bool compiled_ok) {
  BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  KILN_CUDNN_CHECK(
      cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw));
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  n = 0;
  KILN_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                            static_cast<int64_t>(notes.size()), &n, notes.data()));
  for (int64_t i = 0; i < n; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return false;
    if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && dtype == DType::Float32 && !tf32) return false;
  }
  if (!compiled_ok) {
    std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> behavior{};
    n = 0;
    KILN_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                              static_cast<int64_t>(behavior.size()), &n, behavior.data()));
    for (int64_t i = 0; i < n; ++i)
      if (behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return false;
  }
  return true;
}

/// A finalized plan of `config`, or null when cuDNN cannot make one.
std::unique_ptr<BackendDesc> finalize_plan(cudnnHandle_t handle, const BackendDesc& config) {
  auto plan = std::make_unique<BackendDesc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan->set(kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle);
  plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
  if (cudnnBackendFinalize(plan->get()) != CUDNN_STATUS_SUCCESS) return nullptr;
  return plan;
}

int64_t plan_workspace(const BackendDesc& plan) {
  int64_t bytes = 0, n = 0;
  KILN_CUDNN_CHECK(
      cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &bytes));
  return bytes;
}

void execute_plan(cudnnHandle_t handle, const BackendDesc& plan, const ConvPointers& p, void* workspace) {
  BackendDesc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_ints(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, p.uids.data(), 3);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, p.ptrs.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  KILN_CUDNN_CHECK(cudnnBackendExecute(handle, plan.get(), pack.get()));
}

/// Mean GPU time of `plan` over a few runs on the call's operands (after one untimed run).
float time_plan(cudnnHandle_t handle, int device, cudaStream_t stream, const BackendDesc& plan, const ConvPointers& p,
                void* workspace) {
  execute_plan(handle, plan, p, workspace);
  struct Events {  // timing events (the runtime's pool has none: its events skip timing)
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Events() {
      if (start != nullptr) (void)cudaEventDestroy(start);
      if (stop != nullptr) (void)cudaEventDestroy(stop);
    }
  } ev;
  set_device(device);
  KILN_CUDA_CHECK(cudaEventCreate(&ev.start));
  KILN_CUDA_CHECK(cudaEventCreate(&ev.stop));
  constexpr int kRuns = 3;
  KILN_CUDA_CHECK(cudaEventRecord(ev.start, stream));
  for (int i = 0; i < kRuns; ++i) execute_plan(handle, plan, p, workspace);
  KILN_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
  KILN_CUDA_CHECK(cudaEventSynchronize(ev.stop));
  float ms = 0.0f;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
  return ms / kRuns;
}

/// Builds the backend API's plan for `key`: cuDNN's heuristics (mode A, then its fallback list) rank the
/// engine configurations; the first acceptable one that finalizes and whose workspace kiln can allocate is
/// taken, or with benchmarking every such one (no run-time-compiled engines) is timed on the call's operands
/// and the fastest kept. Null when none qualifies or cuDNN refuses the problem.
std::shared_ptr<ConvPlan> build_plan(const ConvKey& key, cudnnDataType_t type, cudnnHandle_t handle,
                                     cudaStream_t stream, const ConvPointers& pointers, std::string& refusal) {
  try {
    auto plan = std::make_shared<ConvPlan>();
    const bool dbl = key.dtype == DType::Float64;
    plan->parts.push_back(backend_tensor(kUidX, key.x, type, key.channels_last, key.alignment));
    plan->parts.push_back(backend_tensor(kUidW, key.w, type, key.channels_last, key.alignment));
    plan->parts.push_back(backend_tensor(kUidY, key.y, type, key.channels_last, key.alignment));
    const BackendDesc& xd = *plan->parts[0];
    const BackendDesc& wd = *plan->parts[1];
    const BackendDesc& yd = *plan->parts[2];

    auto conv = std::make_unique<BackendDesc>(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnDataType_t compute = dbl ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    conv->set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    conv->set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    conv->set_int(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 2);
    conv->set_ints(CUDNN_ATTR_CONVOLUTION_DILATIONS, key.dilation.data(), 2);
    conv->set_ints(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, key.stride.data(), 2);
    conv->set_ints(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, key.padding.data(), 2);
    conv->set_ints(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, key.padding.data(), 2);
    conv->finalize();

    const float f1 = 1.0f, f0 = 0.0f;
    const double d1 = 1.0, d0 = 0.0;
    const cudnnBackendAttributeType_t scale_type = dbl ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
    const void* one = dbl ? static_cast<const void*>(&d1) : static_cast<const void*>(&f1);
    const void* zero = dbl ? static_cast<const void*>(&d0) : static_cast<const void*>(&f0);
    std::unique_ptr<BackendDesc> op;
    switch (key.kind) {
      case detail::ConvKind::Forward:
        op = std::make_unique<BackendDesc>(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, xd);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, wd);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, yd);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, *conv);
        op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, scale_type, 1, one);
        op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, scale_type, 1, zero);
        break;
      case detail::ConvKind::BackwardInput:
        op = std::make_unique<BackendDesc>(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, xd);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, wd);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, yd);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, *conv);
        op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, scale_type, 1, one);
        op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, scale_type, 1, zero);
        break;
      case detail::ConvKind::BackwardWeight:
        op = std::make_unique<BackendDesc>(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, xd);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, wd);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, yd);
        op->set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, *conv);
        op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, scale_type, 1, one);
        op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, scale_type, 1, zero);
        break;
    }
    op->finalize();
    auto graph = std::make_unique<BackendDesc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    cudnnBackendDescriptor_t raw_op = op->get();
    graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_op);
    graph->set(kGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle);
    graph->finalize();

    const int device = key.device;
    struct Made {
      std::unique_ptr<BackendDesc> config, plan;
      int64_t workspace;
    };
    std::optional<Made> best;
    float best_ms = 0.0f;
    std::shared_ptr<Storage> scratch;  // the benchmark's workspace, grown as needed
    // The benchmark times the first kMaxTimed acceptable engines (10, as PyTorch) of the heuristics' ranking (the slow
    // tail of fallback engines would cost seconds per shape); cuDNN's fallback list is tried when mode A has none.
    constexpr int kMaxTimed = 10;  // torch.backends.cudnn.benchmark_limit's default
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      if (best) break;
      int timed_count = 0;
      for (auto& config : heuristic_configs(*graph, mode)) {
        if (!acceptable(*config, key.dtype, key.tf32, !key.benchmark)) continue;
        std::unique_ptr<BackendDesc> made = finalize_plan(handle, *config);
        if (!made) continue;
        const int64_t bytes = plan_workspace(*made);
        if (!key.benchmark) {
          std::shared_ptr<Storage> ws = try_workspace(device, static_cast<size_t>(bytes), stream);
          if (bytes > 0 && !ws) continue;
          best = Made{std::move(config), std::move(made), bytes};
          break;
        }
        if (bytes > 0 && (!scratch || scratch->nbytes() < static_cast<size_t>(bytes))) {
          scratch.reset();
          scratch = try_workspace(device, static_cast<size_t>(bytes), stream);
          if (!scratch) continue;
        }
        float ms = 0.0f;
        try {
          ms = time_plan(handle, device, stream, *made, pointers, bytes > 0 ? scratch->data() : nullptr);
        } catch (const DeviceError&) {
          continue;  // an engine that refuses to run these operands: the next one
        }
        if (!best || ms < best_ms) {
          best_ms = ms;
          best = Made{std::move(config), std::move(made), bytes};
        }
        if (++timed_count == kMaxTimed) break;
      }
    }
    if (!best) {
      refusal = "no engine of cuDNN's heuristics qualifies";
      return nullptr;
    }
    plan->parts.push_back(std::move(conv));
    plan->parts.push_back(std::move(op));
    plan->parts.push_back(std::move(graph));
    plan->parts.push_back(std::move(best->config));
    plan->plan = std::move(best->plan);
    plan->workspace = best->workspace;
    return plan;
  } catch (const DeviceError& e) {
    refusal = e.what();
    return nullptr;  // cuDNN refused a descriptor: the descriptor API runs the problem
  }
}

/// Runs the call through the backend API's cached plan; false when there is none (the descriptor API runs it).
bool run_backend(CudnnState& state, const ConvKey& key, cudnnDataType_t type, cudaStream_t stream,
                 const ConvPointers& pointers) {
  auto it = state.plans.find(key);
  std::shared_ptr<ConvPlan> plan;
  if (it != state.plans.end()) {
    plan = it->second;
  } else {
    if (thread_captures() > 0) {
      // A capture builds no plan (building may load modules and time engines): the plan a benchmark chose
      // before the capture, or the descriptor API.
      if (!kiln::cudnn::benchmark()) return false;
      ConvKey timed_key = key;
      timed_key.benchmark = true;
      auto timed_it = state.plans.find(timed_key);
      if (timed_it == state.plans.end() || !timed_it->second) return false;
      plan = timed_it->second;
    } else {
      plan = build_plan(key, type, state.handle, stream, pointers, state.refusal);
      state.plans.emplace(key, plan);
    }
  }
  if (!plan) return false;
  const int device = key.device;
  std::shared_ptr<Storage> workspace = try_workspace(device, static_cast<size_t>(plan->workspace), stream);
  if (plan->workspace > 0 && !workspace)
    throw OutOfMemoryError("conv2d: cuDNN's plan for this shape needs " + std::to_string(plan->workspace) +
                           " bytes of workspace and the GPU has no room; free memory or use a smaller batch");
  execute_plan(state.handle, *plan->plan, pointers, workspace ? workspace->data() : nullptr);
  return true;
}

}  // namespace

bool cuda_convolution(const detail::ConvCall& call) {
  using detail::ConvKind;
  const Array& out = call.out;
  const DType dtype = out.dtype();
  const std::optional<cudnnDataType_t> type = data_type(dtype);
  if (!type) return false;
  const Array& x_side = call.kind == ConvKind::BackwardInput ? out : *call.x;
  const Array& w_side = call.kind == ConvKind::BackwardWeight ? out : *call.w;
  const Array& y_side = call.kind == ConvKind::Forward ? out : *call.dy;
  if (!fits_int(x_side) || !fits_int(w_side) || !fits_int(y_side)) return false;
  const bool cl = call.channels_last;
  const int device = out.device().index;
  const bool tf32 = dtype == DType::Float32 && kiln::cudnn::allow_tf32();
  const bool float32_no_tf32 = dtype == DType::Float32 && !tf32;
  const bool benchmark = kiln::cudnn::benchmark() && thread_captures() == 0;
  const ConvPointers pointers = conv_pointers(call);
  ConvKey key;
  key.device = device, key.kind = call.kind, key.dtype = dtype, key.channels_last = cl, key.tf32 = tf32;
  key.benchmark = benchmark;
  for (int i = 0; i < 4; ++i) key.x[i] = x_side.shape(i), key.w[i] = w_side.shape(i), key.y[i] = y_side.shape(i);
  for (int i = 0; i < 2; ++i)
    key.stride[i] = call.stride[i], key.padding[i] = call.padding[i], key.dilation[i] = call.dilation[i];
  key.groups = call.groups;
  key.alignment = common_alignment(pointers);

  ConvProblem p;
  p.stream = current_stream(device);
  CudnnState* state = bound_state(device, p.stream);
  if (!legacy_only() && run_backend(*state, key, *type, p.stream, pointers)) return true;

  // The descriptor API.
  p.handle = state->handle;
  set_tensor(p.x, x_side.shape(), *type, cl);
  set_tensor(p.y, y_side.shape(), *type, cl);
  KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, *type, cl ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                              static_cast<int>(w_side.shape(0)), static_cast<int>(w_side.shape(1)),
                                              static_cast<int>(w_side.shape(2)), static_cast<int>(w_side.shape(3))));
  KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      p.conv, static_cast<int>(call.padding[0]), static_cast<int>(call.padding[1]), static_cast<int>(call.stride[0]),
      static_cast<int>(call.stride[1]), static_cast<int>(call.dilation[0]), static_cast<int>(call.dilation[1]),
      CUDNN_CROSS_CORRELATION, dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
  KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p.conv, static_cast<int>(call.groups)));
  const cudnnMathType_t base_math =
      float32_no_tf32
          ? CUDNN_FMA_MATH
          : (dtype == DType::Float16 || dtype == DType::BFloat16 ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH);
  KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, base_math));

  p.x_ptr = call.x ? call.x->data_ptr() : nullptr;
  p.w_ptr = call.w ? call.w->data_ptr() : nullptr;
  p.dy_ptr = call.dy ? call.dy->data_ptr() : nullptr;
  p.out_ptr = out.data_ptr();

  auto math_of = [&](const Candidate& c) { return float32_no_tf32 ? CUDNN_FMA_MATH : c.math; };
  Scale s;
  s.dbl = dtype == DType::Float64;
  // Runs the step with `choice`; cuDNN's status (a check fails before anything is queued).
  auto run = [&](const AlgoChoice& choice, const std::shared_ptr<Storage>& workspace) {
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, choice.math));
    void* ws = workspace ? workspace->data() : nullptr;
    switch (call.kind) {
      case ConvKind::Forward:
        return cudnnConvolutionForward(p.handle, s.one(), p.x, p.x_ptr, p.w, p.w_ptr, p.conv,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), ws, choice.workspace,
                                       s.zero(), p.y, p.out_ptr);
      case ConvKind::BackwardInput:
        return cudnnConvolutionBackwardData(p.handle, s.one(), p.w, p.w_ptr, p.y, p.dy_ptr, p.conv,
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo), ws,
                                            choice.workspace, s.zero(), p.x, p.out_ptr);
      case ConvKind::BackwardWeight:
        return cudnnConvolutionBackwardFilter(p.handle, s.one(), p.x, p.x_ptr, p.y, p.dy_ptr, p.conv,
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice.algo), ws,
                                              choice.workspace, s.zero(), p.w, p.out_ptr);
    }
    return CUDNN_STATUS_BAD_PARAM;
  };
  std::optional<AlgoChoice> choice = AlgoCache::instance().find(key);
  if (!choice && !benchmark && kiln::cudnn::benchmark()) {
    // Capturing (nothing can be timed then): the algorithm a benchmark chose for this problem before the
    // capture, when there was one (torch.cuda.graphs' warm-up rule), rather than the heuristics' first choice.
    ConvKey timed_key = key;
    timed_key.benchmark = true;
    choice = AlgoCache::instance().find(timed_key);
  }
  if (choice) {
    std::shared_ptr<Storage> workspace = try_workspace(device, choice->workspace, p.stream);
    if (choice->workspace > 0 && !workspace)
      throw OutOfMemoryError("conv2d: cuDNN's algorithm for this shape needs " + std::to_string(choice->workspace) +
                             " bytes of workspace and the GPU has no room; free memory or use a smaller batch");
    const cudnnStatus_t status = run(*choice, workspace);
    if (status != CUDNN_STATUS_SUCCESS)
      throw_cudnn_error(status, "the convolution's cached algorithm", __FILE__, __LINE__);
    return true;
  }
  std::vector<Candidate> ranked = heuristics(call.kind, p);
  if (benchmark) {
    size_t most = 0;
    for (const Candidate& c : ranked)
      if (c.status == CUDNN_STATUS_SUCCESS) most = std::max(most, c.memory);
    std::shared_ptr<Storage> scratch = try_workspace(device, most, p.stream);
    if (!scratch) most = 0;
    // The timing runs on the handle's stream; it reads the inputs, which the stream orders after their writes.
    ranked = timed(call.kind, p, scratch ? scratch->data() : nullptr, most);
  }
  // The first candidate that runs: cuDNN 9's heuristics may rank first an algorithm its own checks then refuse
  // (BAD_PARAM for a float16 channels-last depthwise input gradient on an H200), so a refusal tries the next.
  for (const Candidate& c : ranked) {
    if (c.status != CUDNN_STATUS_SUCCESS) continue;
    std::shared_ptr<Storage> ws = try_workspace(device, c.memory, p.stream);
    if (c.memory > 0 && !ws) continue;
    const AlgoChoice candidate{c.algo, math_of(c), c.memory};
    const cudnnStatus_t status = run(candidate, ws);
    const int category = CUDNN_STATUS_CATEGORY(static_cast<int>(status));
    if (category == CUDNN_STATUS_BAD_PARAM || category == CUDNN_STATUS_NOT_SUPPORTED) continue;
    if (status != CUDNN_STATUS_SUCCESS) throw_cudnn_error(status, "the convolution", __FILE__, __LINE__);
    AlgoCache::instance().insert(key, candidate);
    return true;
  }
  return false;  // nothing cuDNN offers runs this problem: the reference does
}

CudnnPlanCounts cudnn_plan_counts(int device) {
  CudnnPlanCounts counts;
  const CudnnState* state = thread_handle<CudnnState>(device, create_state);
  for (const auto& [key, plan] : state->plans) ++(plan ? counts.plans : counts.without);
  counts.refusal = state->refusal;
  return counts;
}

void cudnn_force_descriptor_api(bool on) { legacy_flag().store(on, std::memory_order_relaxed); }

bool cuda_pooling(const detail::PoolCall& call) {
  using detail::PoolKind;
  const bool max = call.kind == PoolKind::MaxForward || call.kind == PoolKind::MaxBackward;
  const bool forward = call.kind == PoolKind::MaxForward || call.kind == PoolKind::AvgForward;
  const Array& in = forward ? *call.x : call.out;    // the input side (x, or dx)
  const Array& out = forward ? call.out : *call.dy;  // the output side (y, or dy)
  const std::optional<cudnnDataType_t> type = data_type(in.dtype());
  if (!type || call.dilation[0] != 1 || call.dilation[1] != 1 || !fits_int(in) || !fits_int(out)) return false;
  const int device = call.out.device().index;
  cudnnHandle_t handle = bound_handle(device, current_stream(device));
  TensorDesc xd, yd;
  set_tensor(xd, in.shape(), *type, call.channels_last);
  set_tensor(yd, out.shape(), *type, call.channels_last);
  PoolDesc pd;
  // Max: padding never wins (cuDNN ignores padded positions); average: padding counts (count_include_pad).
  KILN_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
      pd, max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN,
      static_cast<int>(call.kernel[0]), static_cast<int>(call.kernel[1]), static_cast<int>(call.padding[0]),
      static_cast<int>(call.padding[1]), static_cast<int>(call.stride[0]), static_cast<int>(call.stride[1])));
  Scale s;
  s.dbl = in.dtype() == DType::Float64;
  if (forward) {
    KILN_CUDNN_CHECK(
        cudnnPoolingForward(handle, pd, s.one(), xd, call.x->data_ptr(), s.zero(), yd, call.out.data_ptr()));
  } else {
    // Average pooling's backward reads neither x nor y; cuDNN still takes the pointers (dy and dx stand in).
    const void* y = max ? call.y->data_ptr() : call.dy->data_ptr();
    const void* x = max ? call.x->data_ptr() : call.out.data_ptr();
    KILN_CUDNN_CHECK(cudnnPoolingBackward(handle, pd, s.one(), yd, y, yd, call.dy->data_ptr(), xd, x, s.zero(), xd,
                                          call.out.data_ptr()));
  }
  return true;
}

bool cuda_batch_norm(detail::BatchNormCall& call) {
  using detail::BatchNormKind;
  const Array& x = *call.x;
  const std::optional<cudnnDataType_t> type = data_type(x.dtype());
  if (!type || call.eps < CUDNN_BN_MIN_EPSILON || !fits_int(x)) return false;
  const bool cl = call.channels_last;
  const int device = x.device().index;
  const cudaStream_t stream = current_stream(device);
  cudnnHandle_t handle = bound_handle(device, stream);
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
  TensorDesc xd, bnd;
  set_tensor(xd, x.shape(), *type, cl);
  KILN_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(bnd, xd, mode));
  Scale s;
  s.dbl = x.dtype() == DType::Float64;
  const bool running = call.running_mean->defined();
  switch (call.kind) {
    case BatchNormKind::Training:
      KILN_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
          handle, mode, s.one(), s.zero(), xd, x.data_ptr(), xd, call.y.data_ptr(), bnd, call.weight->data_ptr(),
          call.bias->data_ptr(), call.momentum, running ? call.running_mean->data_ptr() : nullptr,
          running ? call.running_var->data_ptr() : nullptr, call.eps, call.mean.data_ptr(), call.invstd.data_ptr()));
      break;
    case BatchNormKind::Evaluation:
      KILN_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          handle, mode, s.one(), s.zero(), xd, x.data_ptr(), xd, call.y.data_ptr(), bnd, call.weight->data_ptr(),
          call.bias->data_ptr(), call.running_mean->data_ptr(), call.running_var->data_ptr(), call.eps));
      break;
    case BatchNormKind::Backward:
      KILN_CUDNN_CHECK(cudnnBatchNormalizationBackward(
          handle, mode, s.one(), s.zero(), s.one(), s.zero(), xd, x.data_ptr(), xd, call.dy->data_ptr(), xd,
          call.dx.data_ptr(), bnd, call.weight->data_ptr(), call.dweight.data_ptr(), call.dbias.data_ptr(), call.eps,
          call.mean.data_ptr(), call.invstd.data_ptr()));
      break;
  }
  return true;
}

}  // namespace kiln::cuda_impl
