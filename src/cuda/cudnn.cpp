// cuDNN engines of Backend::convolution and Backend::batch_norm (core/backend.hpp). Convolutions run first
// through the backend API's cached execution plans (cudnn_plans.cpp); a problem without a plan, and pooling and
// batch normalisation, go through cuDNN's descriptor API here (cudnnConvolutionForward / BackwardData /
// BackwardFilter, cudnnPooling*, cudnnBatchNormalization*).
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
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/cudnn_common.hpp"
#include "cuda/cudnn_plans.hpp"
#include "cuda/handle_pool.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "kiln/conv.hpp"

namespace kiln::cuda_impl {

namespace {

cudnnHandle_t bound_handle(int device, cudaStream_t stream) { return bound_state(device, stream)->handle; }

using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

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

  const cudaStream_t stream = current_stream(device);
  CudnnState* state = bound_state(device, stream);
  if (!legacy_only() && run_backend(*state, key, *type, stream, pointers)) return true;

  // The descriptor API (its descriptors are made only here: the plans' path above needs none).
  ConvProblem p;
  p.stream = stream;
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
  // (BAD_PARAM for a float16 channels-last depthwise input gradient), so a refusal tries the next.
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
  // A backward masked by a fused ReLU is not cuDNN's: the core unmasks it first (relu_backward) and calls again.
  if (!type || call.eps < CUDNN_BN_MIN_EPSILON || !fits_int(x) || (call.relu && call.kind == BatchNormKind::Backward))
    return false;
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
