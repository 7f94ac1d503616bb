// Convolutions through cuDNN's backend (graph) API, one execution plan per problem, kept.
//
// cuDNN 9 implements the descriptor API on its backend API and keeps one execution plan, the previous call's:
// a network of many convolution shapes builds a plan on every call (tens to hundreds of microseconds of host
// time each). kiln builds one plan per problem through the backend API and keeps it (per thread and device,
// with the handle it was made with), so a repeated convolution costs a lookup, a variant pack and
// cudnnBackendExecute, as PyTorch's cuDNN frontend path. A problem the backend API has no plan for (or any
// failure while building one) runs through the descriptor API (cudnn.cpp); the tests force that path
// (cudnn_force_descriptor_api).
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cudnn_common.hpp"
#include "cuda/cudnn_plans.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "kiln/conv.hpp"

namespace kiln::cuda_impl {
namespace {

// Set by the tests (cudnn_force_descriptor_api) to run every problem through the descriptor API.
std::atomic<bool>& legacy_flag() {
  static std::atomic<bool> legacy{false};
  return legacy;
}

}  // namespace

/// One backend descriptor, destroyed with its owner. Setters throw DeviceError (caught by plan building).
/// (BackendDesc and ConvPlan are outside the anonymous namespace: CudnnState, cudnn_common.hpp, holds ConvPlans.)
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

/// A finalized execution plan and the descriptors it was made from (kept alive with it).
struct ConvPlan {
  std::vector<std::unique_ptr<BackendDesc>> parts;  // tensors, convolution, operation, graph, engine config
  std::unique_ptr<BackendDesc> plan;
  int64_t workspace = 0;
};

namespace {

// The handle attributes are deprecated in cuDNN 9.19 (execution takes the handle) and required before it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';
/// The uids of ConvPointers' operands, in their order.
constexpr std::array<int64_t, 3> kUids{kUidX, kUidW, kUidY};

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
  pack.set_ints(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, kUids.data(), 3);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, p.data());
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

}  // namespace

bool legacy_only() { return legacy_flag().load(std::memory_order_relaxed); }

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

CudnnPlanCounts cudnn_plan_counts(int device) {
  CudnnPlanCounts counts;
  const CudnnState* state = thread_state(device);
  for (const auto& [key, plan] : state->plans) ++(plan ? counts.plans : counts.without);
  counts.refusal = state->refusal;
  return counts;
}

void cudnn_force_descriptor_api(bool on) { legacy_flag().store(on, std::memory_order_relaxed); }

}  // namespace kiln::cuda_impl
