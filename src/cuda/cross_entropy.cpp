// Cross entropy of (N, C) logits on the GPU (CudaBackend::cross_entropy), as two hand-written kernels that read
// the logits at memory bandwidth; the fused graph they replace (nn::cross_entropy's CrossEntropyKernels) took a
// max pass and a sum-of-exponentials pass over each row forward, and its backward's generated kernel indexed
// every element through the broadcast of its row's values.
//  - ce_forward: one pass per row with an online log-sum-exp (a running max; the sum of exponentials rescaled
//    when the max grows, once per chunk of up to 32 values), the row's sum for label smoothing's mean beside it,
//    and the label's logit read once; each thread has four 16-byte loads in flight; the row's parts combine by
//    warp shuffles, then (a block per row) through shared memory;
//  - ce_backward: (exp(x - lse) - (1 - ls) * onehot - ls / C) * g per element, 16-byte loads and stores, the
//    result rounded to the logits' dtype (the cast's backward under autocast) as the fused backward computes it.
// A row of at most kWarpRowBytes goes to one warp (8 rows a 256-thread block), a longer one to a block of 256.
// Rows need not start at a 16-byte boundary (C = 1001): each row's elements before its first boundary and after
// its last whole vector are read one at a time. Both kernels assign elements to threads and combine their parts
// in a fixed order: the same bits on every run.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/backend.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "kernel_sources/cross_entropy.cuh.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {
namespace {

constexpr int kThreads = 256;             ///< the kernels' block (cross_entropy.cuh's ce::kThreads)
constexpr int64_t kWarpRowBytes = 16384;  ///< rows up to this size take a warp each, longer ones a block

}  // namespace

std::string cross_entropy_source(DType logits) {
  std::string source = device_prelude();
  source += "typedef " + std::string(device_type_name(logits)) + " IN;\n";
  return source + std::string(kernel_sources::cross_entropy_cuh);
}

namespace {

std::shared_ptr<Module> ce_module(int device, DType logits) {
  static std::mutex mutex;
  static std::map<std::pair<int, DType>, std::shared_ptr<Module>> modules;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = modules.find({device, logits}); it != modules.end()) return it->second;
  }
  // No fma contraction, as every built-in kernel: x * keep + ... rounds as the fused graph's kernels do.
  CompileOptions options;
  options.options = builtin_kernel_options();
  std::shared_ptr<Module> module =
      load_module(cross_entropy_source(logits), "cross_entropy_" + std::string(dtype_name(logits)), device, options);
  std::lock_guard<std::mutex> lock(mutex);
  return modules.try_emplace({device, logits}, module).first->second;
}

}  // namespace

bool cuda_cross_entropy(detail::CrossEntropyCall& call) {
  const Array& x = *call.logits;
  const DType dt = x.dtype();
  if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16) return false;
  if (x.ndim() != 2 || !x.is_contiguous() || call.labels->dtype() != DType::Int64 || !call.labels->is_contiguous())
    return false;
  long long N = x.shape(0), C = x.shape(1);
  if (N == 0 || C == 0) return false;
  const int device = x.device().index;
  const cudaStream_t stream = current_stream(device);
  std::shared_ptr<Module> module = ce_module(device, dt);
  const bool warp = C * itemsize(dt) <= kWarpRowBytes;
  const int64_t rows_per_block = warp ? kThreads / 32 : 1;
  const dim3 grid(static_cast<unsigned>(ceil_div(N, rows_per_block)));
  const void* xp = x.data_ptr();
  const void* labels = call.labels->data_ptr();
  float keep = static_cast<float>(1.0 - call.ls);
  if (call.kind == detail::CrossEntropyKind::Forward) {
    void* loss = call.loss.data_ptr();
    void* lse = call.lse.data_ptr();
    float ls = static_cast<float>(call.ls);
    int smooth = call.ls > 0 ? 1 : 0;
    void* args[] = {&xp, &labels, &loss, &lse, &N, &C, &keep, &ls, &smooth};
    const char* kernel = warp ? "ce_forward_warp" : "ce_forward_block";
    launch(module->function(kernel), grid, dim3(kThreads), 0, stream, args, kernel);
    return true;
  }
  const Array& g = *call.grad;
  if (g.dtype() != DType::Float32 || g.ndim() != 1 || g.shape(0) != N) return false;
  const void* lse = call.lse.data_ptr();
  const void* gp = g.data_ptr();
  long long g_stride = g.strides()[0];
  void* dx = call.dx.data_ptr();
  float ls_over_c = static_cast<float>(call.ls / static_cast<double>(C));
  // 16-byte loads and stores pair up only when x and dx sit at one offset from a 16-byte boundary.
  int vectors = reinterpret_cast<uintptr_t>(xp) % 16 == reinterpret_cast<uintptr_t>(dx) % 16 ? 1 : 0;
  void* args[] = {&xp, &lse, &labels, &gp, &g_stride, &dx, &N, &C, &keep, &ls_over_c, &vectors};
  const char* kernel = warp ? "ce_backward_warp" : "ce_backward_block";
  launch(module->function(kernel), grid, dim3(kThreads), 0, stream, args, kernel);
  return true;
}

}  // namespace kiln::cuda_impl
