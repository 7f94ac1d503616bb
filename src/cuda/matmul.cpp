// GPU matrix products: cuBLAS for the float dtypes, a generated tiled kernel for
// everything else, and the TF32 switch (kiln::cuda::set_allow_tf32).
//
// cuBLAS is column-major and kiln row-major, so the row-major product
// C (m x n) = A (m x k) B (k x n) is computed as the column-major C^T = B^T A^T:
// B is cuBLAS's first operand and A its second. A row-major matrix (column
// stride 1) read column-major is its transpose (CUBLAS_OP_N, ld = row stride);
// a column-major one (row stride 1, e.g. a transposed view) is passed with
// CUBLAS_OP_T and ld = column stride, so transposed inputs are never copied.
// Batches go through cublasGemmStridedBatchedEx; a batch stride of 0 (a
// broadcast operand) is valid there. When only B is broadcast and A's batches
// are stacked rows, the batch folds into m: one large gemm instead of many.
// float16/bfloat16 compute in float32 (CUBLAS_COMPUTE_32F, reductions kept in
// float32); float32 uses CUBLAS_COMPUTE_32F_FAST_TF32 only when allow_tf32().
//
// Handles: one cuBLAS handle per (device, thread), taken lazily from a per-device
// pool and given back when the thread exits (handles are never destroyed: doing
// so while the process exits is unsafe). Each call binds the handle to the
// device's current stream and to a workspace of its own for that stream, from
// the caching allocator (as PyTorch does), so kernels of one handle on two
// streams never share scratch memory and graph capture needs no cudaMalloc.
//
// Other dtypes (bool, integers) and layouts cuBLAS cannot read run the kernel of
// matmul_fallback_source: 16x16 output tiles through shared memory, integers
// multiplied and summed modulo 2^64 then narrowed like the CPU, bool as or-of-ands.
#include "cuda/matmul.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/handle_pool.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "cuda/template.hpp"
#include "kernel_sources/matmul_tiled.cuh.in.hpp"
#include "kiln/cuda.hpp"

namespace kiln::cuda {
namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace kiln::cuda

namespace kiln::cuda_impl {
namespace {

// ------------------------------------------------------------------ checked cuBLAS calls

/// Throws CudaError (OutOfMemoryError for CUBLAS_STATUS_ALLOC_FAILED) naming the call, file:line and device.
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  const char* path = std::strstr(file, "src/");
  std::string message = std::string(call) + " failed at " + (path ? path : file) + ":" + std::to_string(line) + " on " +
                        (device >= 0 ? "cuda:" + std::to_string(device) : std::string("no current device")) + ": " +
                        cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")";
  if (status == CUBLAS_STATUS_ALLOC_FAILED)
    throw OutOfMemoryError(message + "; free arrays or call kiln::cuda::empty_cache() and retry");
  throw CudaError(message);
}

#define KILN_CUBLAS_CHECK(expr)                                                       \
  do {                                                                                \
    cublasStatus_t kiln_status_ = (expr);                                             \
    if (kiln_status_ != CUBLAS_STATUS_SUCCESS)                                        \
      ::kiln::cuda_impl::throw_cublas_error(kiln_status_, #expr, __FILE__, __LINE__); \
  } while (0)

// ------------------------------------------------------------------ handles and workspaces

/// A cuBLAS handle and the workspaces it has used, one per stream; the thread's cuBLASLt handle (made at its
/// first fused product) shares them.
struct HandleState {
  cublasHandle_t handle = nullptr;
  cublasLtHandle_t lt = nullptr;
  std::vector<std::pair<cudaStream_t, std::shared_ptr<Storage>>> workspaces;
  Storage* workspace = nullptr;  ///< the bound stream's
};

/// A new handle, reductions kept in the compute type.
HandleState* create_handle() {
  auto state = std::make_unique<HandleState>();
  KILN_CUBLAS_CHECK(cublasCreate(&state->handle));
  // Reductions in the compute type (float32) even for float16/bfloat16 outputs: results closer to the CPU's.
  cublasStatus_t status = cublasSetMathMode(
      state->handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  if (status != CUBLAS_STATUS_SUCCESS) {
    (void)cublasDestroy(state->handle);
    throw_cublas_error(status, "cublasSetMathMode(handle, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)", __FILE__,
                       __LINE__);
  }
  return state.release();
}

/// This thread's handles for `device` (the current device), cuBLAS's bound to `stream` and to that stream's
/// workspace (state->workspace).
HandleState* bound_state(int device, cudaStream_t stream) {
  HandleState* state = thread_handle<HandleState>(device, create_handle);
  // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace is set after it, every call.
  KILN_CUBLAS_CHECK(cublasSetStream(state->handle, stream));
  Storage* workspace = nullptr;
  for (const auto& [owner, storage] : state->workspaces)
    if (owner == stream) workspace = storage.get();
  if (!workspace) {
    // Kept for the handle's life, so never from a CUDA graph's private pool (graph_pool = false): a graph
    // captured on `stream` uses this address on every replay, and the handle never frees it.
    state->workspaces.emplace_back(
        stream, device_alloc(device, cublas_workspace_bytes(compute_capability(device)), stream, /*graph_pool=*/false));
    workspace = state->workspaces.back().second.get();
  }
  KILN_CUBLAS_CHECK(cublasSetWorkspace(state->handle, workspace->data(), workspace->nbytes()));
  state->workspace = workspace;
  return state;
}

// ------------------------------------------------------------------ the cuBLAS path

/// The cuBLAS form of a row-major-indexed (rows, cols) matrix with the given strides: row-major data read
/// column-major is the transpose (OP_N, ld = row stride); column-major data is OP_T, ld = column stride.
/// Strides of a size-1 axis are free, as in the front-end. False when neither form fits (the fallback runs).
bool cublas_operand(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, bool& transpose, int64_t& ld) {
  if (rows == 1) row_stride = col_stride == 1 ? cols : 1;
  if (cols == 1) col_stride = row_stride == 1 ? rows : 1;
  if (col_stride == 1 && row_stride >= std::max<int64_t>(1, cols)) {
    transpose = false;
    ld = row_stride;
    return true;
  }
  if (row_stride == 1 && col_stride >= std::max<int64_t>(1, rows)) {
    transpose = true;
    ld = col_stride;
    return true;
  }
  return false;
}

cublasOperation_t operation(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

/// Pointers and types of one gemm call of a plan.
struct GemmData {
  const void* first = nullptr;   ///< B's data
  const void* second = nullptr;  ///< A's data
  void* out = nullptr;
  cudaDataType type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  const void* alpha = nullptr;
  const void* beta = nullptr;
};

/// C^T (n x m, ldc = n) = op(B) op(A) for p.batch matrices, through the 32-bit or the 64-bit API.
void run_gemm(cublasHandle_t handle, const GemmPlan& p, const GemmData& d) {
  const cublasOperation_t op_first = operation(p.transpose_first), op_second = operation(p.transpose_second);
  const bool fits32 = std::max({p.m, p.n, p.k, p.ld_first, p.ld_second, p.batch}) <= INT_MAX;
  if (p.batch == 1) {
    if (fits32) {
      KILN_CUBLAS_CHECK(cublasGemmEx(handle, op_first, op_second, static_cast<int>(p.n), static_cast<int>(p.m),
                                     static_cast<int>(p.k), d.alpha, d.first, d.type, static_cast<int>(p.ld_first),
                                     d.second, d.type, static_cast<int>(p.ld_second), d.beta, d.out, d.type,
                                     static_cast<int>(p.n), d.compute, CUBLAS_GEMM_DEFAULT));
    } else {
      KILN_CUBLAS_CHECK(cublasGemmEx_64(handle, op_first, op_second, p.n, p.m, p.k, d.alpha, d.first, d.type,
                                        p.ld_first, d.second, d.type, p.ld_second, d.beta, d.out, d.type, p.n,
                                        d.compute, CUBLAS_GEMM_DEFAULT));
    }
    return;
  }
  if (fits32) {
    KILN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, op_first, op_second, static_cast<int>(p.n), static_cast<int>(p.m), static_cast<int>(p.k), d.alpha,
        d.first, d.type, static_cast<int>(p.ld_first), p.first_batch_stride, d.second, d.type,
        static_cast<int>(p.ld_second), p.second_batch_stride, d.beta, d.out, d.type, static_cast<int>(p.n),
        p.out_batch_stride, static_cast<int>(p.batch), d.compute, CUBLAS_GEMM_DEFAULT));
  } else {
    KILN_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(handle, op_first, op_second, p.n, p.m, p.k, d.alpha, d.first,
                                                    d.type, p.ld_first, p.first_batch_stride, d.second, d.type,
                                                    p.ld_second, p.second_batch_stride, d.beta, d.out, d.type, p.n,
                                                    p.out_batch_stride, p.batch, d.compute, CUBLAS_GEMM_DEFAULT));
  }
}

// ------------------------------------------------------------------ cuBLASLt: epilogues (bias, bias + GELU)

/// Owners of cuBLASLt descriptors, destroyed when the call returns or throws.
struct LtDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtDesc() {
    if (preference) (void)cublasLtMatmulPreferenceDestroy(preference);
    if (out) (void)cublasLtMatrixLayoutDestroy(out);
    if (second) (void)cublasLtMatrixLayoutDestroy(second);
    if (first) (void)cublasLtMatrixLayoutDestroy(first);
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
  }
};

/// The largest power of two up to 16 dividing a pointer's address (cuBLASLt's kernels need their operands'
/// alignment; the heuristic is told it).
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 1;
  while (alignment < 16 && address % (alignment * 2) == 0) alignment *= 2;
  return alignment;
}

/// The algorithm cuBLASLt's heuristic picked for one shape, layout, dtype and alignment; looked up once per
/// thread and kept (the heuristic costs more host time than the launch).
struct LtKey {
  int device;
  int64_t m, n, k, ld_first, ld_second;
  bool transpose_first, transpose_second;
  int type, compute, epilogue;
  uint32_t align_first, align_second, align_out, align_bias, align_aux;
  bool operator==(const LtKey&) const = default;
};
struct LtEntry {
  LtKey key;
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

/// What a cuBLASLt product does after the sum: `kind` with its vector (the bias it adds) and, for GELU_AUX_BIAS,
/// the matrix the pre-activation goes to (out's layout, leading dimension n).
struct LtEpilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_BIAS;
  const void* vector = nullptr;
  void* aux = nullptr;
};

/// The B^T-side product with a cuBLASLt epilogue: BIAS (out = product + bias, a row of n, the sum rounded once)
/// or GELU_AUX_BIAS (out = gelu_tanh(product + bias), the sum into aux). False (nothing queued) when the plan is
/// batched, the bias or aux is not 16-byte aligned, aux's leading dimension does not suit, or the heuristic offers
/// nothing.
bool cublaslt_gemm(HandleState& state, int device, cudaStream_t stream, const GemmPlan& p, const GemmData& d,
                   const LtEpilogue& e) {
  if (p.batch != 1 || p.per_matrix) return false;
  if (e.aux && p.n % 8 != 0) return false;  // the aux matrix's leading dimension must be a multiple of 8
  const LtKey key{device,
                  p.m,
                  p.n,
                  p.k,
                  p.ld_first,
                  p.ld_second,
                  p.transpose_first,
                  p.transpose_second,
                  static_cast<int>(d.type),
                  static_cast<int>(d.compute),
                  static_cast<int>(e.kind),
                  alignment_of(d.first),
                  alignment_of(d.second),
                  alignment_of(d.out),
                  alignment_of(e.vector),
                  e.aux ? alignment_of(e.aux) : 16u};
  // Bounded: a program of ever-changing shapes (generation with a growing sequence) would otherwise make every
  // call's search longer; the oldest shape's choice is dropped (and looked up again if it comes back).
  constexpr size_t kMaxAlgos = 64;
  thread_local std::vector<LtEntry> algos;
  const LtEntry* entry = nullptr;
  for (const LtEntry& e : algos) {
    if (e.key == key) {
      entry = &e;
      break;
    }
  }
  if (entry && !entry->found) return false;
  if (!state.lt) {
    RelaxedCaptureMode relaxed;  // a first fused product during a graph capture: creating the handle allocates
    KILN_CUBLAS_CHECK(cublasLtCreate(&state.lt));
  }
  const cudaDataType scale = d.type == CUDA_R_64F ? CUDA_R_64F : CUDA_R_32F;
  LtDesc lt;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&lt.desc, d.compute, scale));
  const cublasOperation_t op_first = operation(p.transpose_first), op_second = operation(p.transpose_second);
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e.kind, sizeof e.kind));
  KILN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.vector, sizeof e.vector));
  KILN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &d.type, sizeof d.type));
  if (e.aux) {
    const int64_t ld = p.n;
    KILN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof e.aux));
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  // Column-major: the first operand is n x k (stored k x n when transposed), the second k x m, the output n x m.
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lt.first, d.type, p.transpose_first ? u(p.k) : u(p.n),
                                               p.transpose_first ? u(p.n) : u(p.k), p.ld_first));
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lt.second, d.type, p.transpose_second ? u(p.m) : u(p.k),
                                               p.transpose_second ? u(p.k) : u(p.m), p.ld_second));
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lt.out, d.type, u(p.n), u(p.m), p.n));
  Storage& workspace = *state.workspace;
  if (!entry) {
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&lt.preference));
    const uint64_t bytes = workspace.nbytes();
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(lt.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &bytes, sizeof bytes));
    // As the cuBLAS path's CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: split-K partial sums stay in the
    // compute type, never the output's.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(lt.preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                           &schemes, sizeof schemes));
    const std::tuple<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_first},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_second},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_out},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_out}};
    for (const auto& [attribute, value] : alignments)
      KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(lt.preference, attribute, &value, sizeof value));
    LtEntry found{key};
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(state.lt, lt.desc, lt.first, lt.second, lt.out, lt.out,
                                                                 lt.preference, 1, &result, &count);
    if (status == CUBLAS_STATUS_SUCCESS && count > 0 && key.align_bias >= 16 && key.align_aux >= 16) {
      found.found = true;
      found.algo = result.algo;
    }
    if (algos.size() >= kMaxAlgos) algos.erase(algos.begin());
    algos.push_back(found);
    entry = &algos.back();
    if (!entry->found) return false;
  }
  KILN_CUBLAS_CHECK(cublasLtMatmul(state.lt, lt.desc, d.alpha, d.first, lt.first, d.second, lt.second, d.beta, d.out,
                                   lt.out, d.out, lt.out, &entry->algo, workspace.data(), workspace.nbytes(), stream));
  return true;
}

/// The product through cuBLAS; false (nothing queued) when the dtype or a layout does not suit it.
bool cublas_matmul(const detail::MatmulCall& call, int device, cudaStream_t stream) {
  const DType dtype = call.out.dtype();
  const std::optional<GemmPlan> plan = plan_gemm(*call.a, *call.b, call.out);
  if (!plan) return false;
  if (is_complex(dtype) && call.bias) {  // cuBLASLt's bias epilogue is real: the core adds the bias
    call.bias_added = false;
    return true;
  }
  GemmData d;
  // alpha = 1, beta = 0 in the scale type of each compute type (complex for complex products)
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const double alpha64 = 1.0, beta64 = 0.0;
  const complex64_t alpha_c64(1.0f, 0.0f), beta_c64(0.0f, 0.0f);
  const complex128_t alpha_c128(1.0, 0.0), beta_c128(0.0, 0.0);
  d.alpha = &alpha32;
  d.beta = &beta32;
  switch (dtype) {
    case DType::Float32:
      d.type = CUDA_R_32F;
      d.compute = kiln::cuda::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DType::Float64:
      d.type = CUDA_R_64F;
      d.compute = CUBLAS_COMPUTE_64F;
      d.alpha = &alpha64;
      d.beta = &beta64;
      break;
    case DType::Float16:
      d.type = CUDA_R_16F;
      d.compute = CUBLAS_COMPUTE_32F;
      break;
    case DType::BFloat16:
      if (compute_capability(device) < 80) return false;  // bfloat16 GEMMs need Ampere or newer
      d.type = CUDA_R_16BF;
      d.compute = CUBLAS_COMPUTE_32F;
      break;
    case DType::Complex64:  // interleaved (real, imaginary) pairs, std::complex's layout
      d.type = CUDA_C_32F;
      d.compute = CUBLAS_COMPUTE_32F;
      d.alpha = &alpha_c64;
      d.beta = &beta_c64;
      break;
    case DType::Complex128:
      d.type = CUDA_C_64F;
      d.compute = CUBLAS_COMPUTE_64F;
      d.alpha = &alpha_c128;
      d.beta = &beta_c128;
      break;
    default:
      return false;
  }
  d.first = call.b->data_ptr();
  d.second = call.a->data_ptr();
  d.out = call.out.data_ptr();

  HandleState& state = *bound_state(device, stream);
  cublasHandle_t handle = state.handle;
  if (call.bias) {  // folded through cuBLASLt, or nothing computed (the core's way then)
    LtEpilogue e{CUBLASLT_EPILOGUE_BIAS, call.bias->data_ptr()};
    // GELU in the epilogue for 16-bit outputs only: its approximation of tanh is far from float32/float64's
    // rounding (the core applies gelu_tanh to the folded sum then).
    const bool gelu = call.pre_gelu && (dtype == DType::BFloat16 || dtype == DType::Float16);
    if (gelu) {
      e.kind = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
      e.aux = call.pre_gelu->data_ptr();
    }
    call.bias_added = cublaslt_gemm(state, device, stream, *plan, d, e);
    call.gelu_applied = gelu && call.bias_added;
    return true;
  }
  if (call.gelu_grad_of) {  // DGELU: the product times gelu_tanh'(pre), rounded once; or nothing computed
    if (dtype == DType::BFloat16 || dtype == DType::Float16)
      call.gelu_grad_applied = cublaslt_gemm(state, device, stream, *plan, d,
                                             LtEpilogue{CUBLASLT_EPILOGUE_DGELU, nullptr,
                                                        const_cast<void*>(call.gelu_grad_of->data_ptr())});
    return true;
  }
  if (!plan->per_matrix) {
    run_gemm(handle, *plan, d);
    return true;
  }
  const int64_t isz = itemsize(dtype);
  GemmPlan one = *plan;
  one.batch = 1;
  GemmData matrix = d;
  for (int64_t i = 0; i < plan->batch; ++i) {
    matrix.first = static_cast<const char*>(d.first) + i * plan->first_batch_stride * isz;
    matrix.second = static_cast<const char*>(d.second) + i * plan->second_batch_stride * isz;
    matrix.out = static_cast<char*>(d.out) + i * plan->out_batch_stride * isz;
    run_gemm(handle, one, matrix);
  }
  return true;
}

// ------------------------------------------------------------------ the generated fallback

constexpr int kTile = 16;

/// Kernel arguments after the three pointers (the generated struct MatmulParams has this layout).
struct MatmulParams {
  long long batch, m, n, k;
  long long a_batch, a_row, a_col;
  long long b_batch, b_row, b_col;
};

/// The compiled fallback kernel of one (device, dtype); created once, never freed (like the kernel table).
struct FallbackKernel {
  cudaKernel_t function = nullptr;
  std::shared_ptr<Module> module;
  std::string name;
};

const FallbackKernel& fallback_kernel(int device, DType dtype) {
  constexpr size_t kDTypes = 16;
  static_assert(kNumDTypes <= static_cast<int>(kDTypes), "one slot per (device, dtype): widen kDTypes");
  static std::array<std::atomic<const FallbackKernel*>, kMaxDevices * kDTypes> table{};
  std::atomic<const FallbackKernel*>& slot = table[static_cast<size_t>(device) * kDTypes + static_cast<size_t>(dtype)];
  if (const FallbackKernel* kernel = slot.load(std::memory_order_acquire)) return *kernel;
  auto kernel = std::make_unique<FallbackKernel>();
  kernel->name = matmul_fallback_kernel_name(dtype);
  CompileOptions options;
  options.options = builtin_kernel_options();
  kernel->module = load_module(matmul_fallback_source(dtype), kernel->name, device, options);
  kernel->function = kernel->module->function(kernel->name);
  const FallbackKernel* expected = nullptr;
  if (slot.compare_exchange_strong(expected, kernel.get(), std::memory_order_acq_rel)) return *kernel.release();
  return *expected;  // another thread stored the same kernel first
}

void fallback_matmul(const detail::MatmulCall& call, int device, cudaStream_t stream) {
  const Array& a = *call.a;
  const Array& b = *call.b;
  MatmulParams params{call.out.shape()[0], a.shape()[1],   b.shape()[2],   a.shape()[2],   a.strides()[0],
                      a.strides()[1],      a.strides()[2], b.strides()[0], b.strides()[1], b.strides()[2]};
  const FallbackKernel& kernel = fallback_kernel(device, a.dtype());
  const long long row_tiles = (params.m + kTile - 1) / kTile, col_tiles = (params.n + kTile - 1) / kTile;
  // The kernel loops over tiles and batches beyond the grid, so the grid only has to respect CUDA's limits.
  dim3 grid(static_cast<unsigned>(std::min<long long>(col_tiles, INT_MAX)),
            static_cast<unsigned>(std::min<long long>(row_tiles, 65535)),
            static_cast<unsigned>(std::min<long long>(params.batch, 65535)));
  const void* a_data = a.data_ptr();
  const void* b_data = b.data_ptr();
  void* c_data = call.out.data_ptr();
  void* args[] = {&a_data, &b_data, &c_data, &params};
  launch(kernel.function, grid, dim3(kTile, kTile), 0, stream, args, kernel.name.c_str());
}

/// Accumulator type, element load and multiply-add of the fallback kernel for `dtype`.
struct FallbackArithmetic {
  const char* acc;
  const char* zero;
  const char* load;   ///< expression of `v` (an element) giving the accumulator type
  const char* mac;    ///< new value of `acc` from `acc`, `x`, `y`
  const char* store;  ///< expression of `acc` giving the element type T
};

FallbackArithmetic fallback_arithmetic(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return {"unsigned int", "0u", "(v ? 1u : 0u)", "acc | (x & y)", "acc != 0u"};
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float32:
      return {"float", "0.0f", "kd::cast<float>(v)", "fmaf(x, y, acc)", "kd::cast<T>(acc)"};
    case DType::Float64:
      return {"double", "0.0", "v", "fma(x, y, acc)", "acc"};
    case DType::Complex64:  // the textbook product (kd::complex_t's operator*), as the CPU's complex matmul
      return {"kd::c64", "kd::c64(0.0f)", "v", "acc + x * y", "acc"};
    case DType::Complex128:
      return {"kd::c128", "kd::c128(0.0)", "v", "acc + x * y", "acc"};
    default:  // integers: sign-extended to 64 bits, products and sums modulo 2^64, narrowed like the CPU's cast
      return {"kd::u64", "0ull", "(kd::u64)kd::cast<kd::i64>(v)", "acc + x * y", "kd::cast<T>((kd::i64)acc)"};
  }
}

}  // namespace

std::optional<GemmPlan> plan_gemm(const Array& a, const Array& b, const Array& out) {
  const int64_t batch = out.shape()[0], m = a.shape()[1], k = a.shape()[2], n = b.shape()[2];
  GemmPlan p;
  if (!cublas_operand(k, n, b.strides()[1], b.strides()[2], p.transpose_first, p.ld_first) ||
      !cublas_operand(m, k, a.strides()[1], a.strides()[2], p.transpose_second, p.ld_second))
    return std::nullopt;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = batch;
  p.first_batch_stride = batch > 1 ? b.strides()[0] : 0;
  p.second_batch_stride = batch > 1 ? a.strides()[0] : 0;
  p.out_batch_stride = m * n;
  // B shared by every batch and A's batches stacked rows (row-major A, batch stride m * ld): one (batch*m) x n gemm.
  if (batch > 1 && p.first_batch_stride == 0 && !p.transpose_second && p.second_batch_stride == m * p.ld_second) {
    p.m = batch * m;
    p.batch = 1;
    p.second_batch_stride = 0;
  }
  // cuBLAS documents non-negative batch strides only: a reversed batch axis runs one call per matrix.
  p.per_matrix = p.batch > 1 && (p.first_batch_stride < 0 || p.second_batch_stride < 0);
  return p;
}

size_t cublas_workspace_bytes(int cc) {
  // PyTorch's choice: Hopper and newer pick faster kernels with 32 MiB; older GPUs need less.
  return cc >= 90 ? size_t{32} << 20 : size_t{8} << 20;
}

std::string matmul_fallback_kernel_name(DType dtype) { return std::string("kiln_matmul_tiled_") + dtype_tag(dtype); }

std::string matmul_fallback_source(DType dtype) {
  const FallbackArithmetic f = fallback_arithmetic(dtype);
  return device_prelude() + fill_template("matmul_tiled.cuh.in", kernel_sources::matmul_tiled_cuh_in,
                                          {{"name", matmul_fallback_kernel_name(dtype)},
                                           {"type", device_type_name(dtype)},
                                           {"acc_type", f.acc},
                                           {"load", f.load},
                                           {"mac", f.mac},
                                           {"store", f.store},
                                           {"zero", f.zero},
                                           {"tile", std::to_string(kTile)}});
}

void cuda_matmul(const detail::MatmulCall& call) {
  const Array& out = call.out;
  if (out.size() == 0) return;
  if (call.a == nullptr || call.b == nullptr || call.a->ndim() != 3 || call.b->ndim() != 3 || out.ndim() != 3 ||
      call.a->dtype() != out.dtype() || call.b->dtype() != out.dtype() || !out.is_contiguous())
    throw Error("internal: cuda_matmul needs 3-d operands of the output's dtype and a C-contiguous output");
  const int device = out.device().index;
  set_device(device);
  const cudaStream_t stream = current_stream(device);
  if (call.a->shape()[2] == 0) {  // a sum over an empty axis
    KILN_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, static_cast<size_t>(out.nbytes()), stream));
    return;
  }
  // A bias or a GELU gradient cuBLAS could not take: nothing computed (the caller's way then).
  if (cublas_matmul(call, device, stream) || call.bias || call.gelu_grad_of) return;
  fallback_matmul(call, device, stream);
}

}  // namespace kiln::cuda_impl
