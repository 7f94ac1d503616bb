// A layer norm's backward on the GPU (CudaBackend::layer_norm_backward) in one pass over x and dy, as llm.c's
// layernorm_backward: the composed form is a rows kernel for dx, a column reduction of dy * xhat for dweight and
// one of dy for dbias, which read x twice and dy three times (GPT-2 124M's 25 norms of 16384 x 768: 2.7 ms of
// its step on an H200, where reading x and dy once and writing dx takes ~1 ms). Two kernels
// (kernels/layer_norm.cuh), generated per (run width, runs per lane, rows kept in registers) and compiled by NVRTC:
//  - ln_backward_rows: 256-thread blocks, at most one resident wave of them; a warp takes one row at a time, writes
//    its dx and adds dy * xhat and dy into per-lane column sums in registers, which the block adds in shared
//    memory in warp order and writes as its partial sums (blocks x 2 x D floats of scratch);
//  - ln_backward_finish: a (32 columns x 8) block per 32 columns of dweight or dbias adds the blocks' partial sums
//    in a fixed order. No float atomics anywhere: the same inputs give the same bits on every run.
// Float32 contiguous operands with D <= kMaxColumns (a lane's column sums live in registers); anything else is
// declined and the core's composed reference runs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/backend.hpp"
#include "cuda/codegen.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "kernel_sources/layer_norm.cuh.hpp"

namespace kiln::cuda_impl {
namespace {

constexpr int64_t kMaxColumns = 2048;   ///< widest row: 128 column sums a lane in registers
constexpr int64_t kKeptColumns = 1024;  ///< widest row whose x and dy stay in registers between the two phases
constexpr int kWarps = 8;               ///< LN_WARPS of the kernel: rows in flight per block

struct LayerNormKernels {
  KernelTable::Entry rows, finish;
};

/// The kernels for rows of D columns read `vector` floats at once (cached per device and variant).
const LayerNormKernels& layer_norm_kernels(int device, int vector, int64_t d) {
  const int chunks = static_cast<int>(ceil_div(d, 32 * vector));
  const bool keep = d <= kKeptColumns;
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, bool>, std::unique_ptr<LayerNormKernels>> cache;
  const auto key = std::make_tuple(device, vector, chunks, keep);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return *it->second;
  }
  const std::string source = layer_norm_source(vector, chunks, keep);
  auto kernels = std::make_unique<LayerNormKernels>();
  kernels->rows = compile_kernel_entry(device, source, "ln_backward_rows");
  kernels->finish = compile_kernel_entry(device, source, "ln_backward_finish");  // the same module, cached
  std::lock_guard<std::mutex> lock(mutex);
  return *cache.try_emplace(key, std::move(kernels)).first->second;
}

bool aligned16(const Array& a) { return !a.defined() || reinterpret_cast<uintptr_t>(a.data_ptr()) % 16 == 0; }

}  // namespace

std::string layer_norm_source(int vector, int chunks, bool keep) {
  return device_prelude() + "#define LN_V " + std::to_string(vector) + "\n#define LN_CHUNKS " + std::to_string(chunks) +
         "\n#define LN_KEEP " + (keep ? "1" : "0") + "\n" + std::string(kernel_sources::layer_norm_cuh);
}

bool cuda_layer_norm_backward(detail::LayerNormBackwardCall& call) {
  const Array &x = *call.x, &dy = *call.dy, &w = *call.weight, &mean = *call.mean, &rstd = *call.rstd;
  if (x.ndim() != 2 || x.size() == 0) return false;
  const int64_t M = x.shape(0), D = x.shape(1);
  if (D > kMaxColumns) return false;
  for (const Array* a :
       std::initializer_list<const Array*>{&x, &dy, &w, &mean, &rstd, &call.dx, &call.dweight, &call.dbias})
    if (a->defined() && (a->dtype() != DType::Float32 || !a->is_contiguous())) return false;
  const bool columns = call.dweight.defined() || call.dbias.defined();
  if (!call.dx.defined() && !columns) return true;
  const int device = x.device().index;
  const cudaStream_t stream = current_stream(device);
  const int vector = D % 4 == 0 && aligned16(x) && aligned16(dy) && aligned16(w) && aligned16(call.dx) ? 4 : 1;
  const LayerNormKernels& k = layer_norm_kernels(device, vector, D);
  // One resident wave at most: each block's partial sums cost 2 D floats of scratch and of the finishing read.
  const int64_t wave =
      static_cast<int64_t>(multiprocessor_count(device)) * std::max(1, k.rows.blocks_per_multiprocessor);
  int blocks = static_cast<int>(std::min(ceil_div(M, kWarps), wave));
  std::shared_ptr<Storage> part =
      columns ? device_alloc(device, sizeof(float) * 2 * static_cast<size_t>(blocks * D), stream) : nullptr;
  const void *xp = x.data_ptr(), *dyp = dy.data_ptr(), *wp = w.defined() ? w.data_ptr() : nullptr;
  const void *mp = mean.data_ptr(), *rp = rstd.data_ptr();
  void* dxp = call.dx.defined() ? call.dx.data_ptr() : nullptr;
  void* partp = part ? part->data() : nullptr;
  long long rows = M, cols = D;
  void* args[] = {&xp, &dyp, &wp, &mp, &rp, &dxp, &partp, &rows, &cols};
  launch_entry(k.rows, dim3(static_cast<unsigned>(blocks)), dim3(kWarps * 32), stream, args);
  if (columns) {
    void* dwp = call.dweight.defined() ? call.dweight.data_ptr() : nullptr;
    void* dbp = call.dbias.defined() ? call.dbias.data_ptr() : nullptr;
    void* finish_args[] = {&partp, &blocks, &cols, &dwp, &dbp};
    launch_entry(k.finish, dim3(static_cast<unsigned>(ceil_div(D, 32)), 2), dim3(32, 8), stream, finish_args);
  }
  return true;
}

}  // namespace kiln::cuda_impl
