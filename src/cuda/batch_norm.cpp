// Batch normalisation on the GPU (training forward and backward, evaluation), channels-last and NCHW, with an
// optional fused ReLU. Channels-last because cuDNN's descriptor API is many times slower there, in either spatial
// mode. NCHW because of the fused ReLU: a conv-BN-ReLU network runs ReLU after most batch norms, and fused the
// forward writes y once instead of twice and the backward recomputes the ReLU's mask from x and the forward's
// (scale, shift) instead of a separate pass that reads y and the gradient and writes a new one; cuDNN stays ahead
// only on small planes (7x7), where the network spends little of its step (bench/results/source-comment-figures.md).
// KILN_BN_NCHW=cudnn sends NCHW arrays to cuDNN, for measuring.
// A channels-last x is viewed as (rows = N*H*W, C) with C contiguous, an NCHW x as (N, C, HW).
// Up to three kernels per step, generated per (x dtype, statistics dtype) and compiled by NVRTC:
//  - bn_partials (channels-last): a (32 channels x 8 rows) block per (channel tile, row slice) sums, in float64,
//    x and x^2 (forward) or dy and dy * (x - mean) (backward) over its rows; a warp reads 32 adjacent channels
//    of a row. bn_partials_nchw: a 256-thread block per (channel, plane slice) steps through its planes'
//    elements in memory order, four loads in flight per thread;
//  - bn_finalize: a thread per channel adds the slices' partial sums and writes the statistics (mean, invstd,
//    the running averages with the unbiased variance; or dweight, dbias) and the per-channel coefficients
//    (evaluation: the coefficients from the running statistics, no partial sums);
//  - bn_apply (channels-last) / bn_apply_nchw: y = x * scale + shift (max(y, 0) with the ReLU), or dx = (dy -
//    dbias / M - (x - mean) * dweight * invstd / M) * weight * invstd (dy zero where the forward's ReLU was),
//    in the statistics dtype, the channel stepped along the grid-stride loop, not divided out per element;
//    bn_apply_nchw takes four elements per thread per iteration.
// The NCHW kernels' "4" variants load runs of four elements (16 bytes of float32) where every plane holds whole
// runs and the operands are aligned to them (ResNet's planes but 7x7): wider loads keep more bytes in flight per
// thread. The channels-last kernels keep one element per thread per step: a warp's 32 adjacent channels already
// coalesce, and wider variants were slower (bench/results/source-comment-figures.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/backend.hpp"
#include "core/env.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "kernel_sources/batch_norm.cuh.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {
namespace {

using ModuleKey = std::tuple<int, DType, DType>;

}  // namespace

std::string batch_norm_source(DType in, DType stats) {
  std::string source = device_prelude();
  source += "typedef " + std::string(device_type_name(in)) + " IN;\n";
  source += "typedef " + std::string(device_type_name(stats)) + " S;\n";
  return source + std::string(kernel_sources::batch_norm_cuh);
}

namespace {

std::shared_ptr<Module> bn_module(int device, DType in, DType stats) {
  static std::mutex mutex;
  static std::map<ModuleKey, std::shared_ptr<Module>> modules;
  const ModuleKey key{device, in, stats};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = modules.find(key); it != modules.end()) return it->second;
  }
  std::shared_ptr<Module> module =
      load_module(batch_norm_source(in, stats), "batch_norm_" + std::string(dtype_name(in)), device);
  std::lock_guard<std::mutex> lock(mutex);
  return modules.try_emplace(key, module).first->second;
}

/// Where NCHW batch norm runs: these kernels, or cuDNN with KILN_BN_NCHW=cudnn (for measuring one against the
/// other; =kiln is the default).
enum class NchwRoute { Cudnn, Kiln };
NchwRoute nchw_route() {
  static const NchwRoute route =
      detail::env_choice("KILN_BN_NCHW", {"kiln", "cudnn"}, "kiln") == "cudnn" ? NchwRoute::Cudnn : NchwRoute::Kiln;
  return route;
}

}  // namespace

bool cuda_batch_norm_kernels(detail::BatchNormCall& call) {
  using detail::BatchNormKind;
  const Array& x = *call.x;
  const DType stats = call.weight->dtype();
  const bool evaluation = call.kind == BatchNormKind::Evaluation;
  const bool backward = call.kind == BatchNormKind::Backward;
  if (stats != DType::Float32 && stats != DType::Float64) return false;
  if (!call.channels_last && nchw_route() == NchwRoute::Cudnn) return false;
  const int device = x.device().index;
  const cudaStream_t stream = current_stream(device);
  std::shared_ptr<Module> module = bn_module(device, x.dtype(), stats);
  long long C = x.shape(1);
  long long rows = x.size() / C;
  long long n = x.size();
  long long N = x.shape(0);
  long long HW = call.channels_last ? 1 : x.shape(2) * x.shape(3);
  const int64_t sms = multiprocessor_count(device);
  const int64_t tiles = ceil_div(C, 32);
  // Channels-last: (channel tile, row slice) blocks; NCHW: (channel, plane slice) blocks, at most one wave of
  // them (eight 256-thread blocks a multiprocessor) where the channels allow: a grid a little over one wave
  // leaves most multiprocessors idle through its second, partial wave.
  int slices =
      call.channels_last
          ? static_cast<int>(std::clamp<int64_t>(4 * sms / tiles, 1, std::min<int64_t>(ceil_div(rows, 64), 65535)))
          : static_cast<int>(std::clamp<int64_t>(8 * sms / C, 1, std::min<int64_t>(N, 65535)));
  std::shared_ptr<Storage> part =
      evaluation ? nullptr : device_alloc(device, sizeof(double) * 2 * static_cast<size_t>(slices * C), stream);
  // A training forward with ReLU writes its (scale, shift) into call.scale_shift for the backward's mask.
  const bool keep_coef = call.relu && call.kind == BatchNormKind::Training && call.scale_shift.defined();
  std::shared_ptr<Storage> coef =
      keep_coef ? nullptr
                : device_alloc(device, static_cast<size_t>(itemsize(stats)) * 4 * static_cast<size_t>(C), stream);
  const void* xp = x.data_ptr();
  const void* dyp = backward ? call.dy->data_ptr() : nullptr;
  const void* mean_in = backward ? call.mean.data_ptr() : nullptr;
  const void* invstd_in = backward ? call.invstd.data_ptr() : nullptr;
  const void* maskp = backward && call.relu ? call.scale_shift.data_ptr() : nullptr;
  void* partp = part ? part->data() : nullptr;
  void* coefp = keep_coef ? call.scale_shift.data_ptr() : coef->data();
  void* outp = backward ? call.dx.data_ptr() : call.y.data_ptr();
  // NCHW runs of four elements at once when every plane holds whole runs and the operands are aligned to them.
  const auto aligned = [&](const void* p) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % (4 * itemsize(x.dtype())) == 0;
  };
  const bool vec4 = !call.channels_last && HW % 4 == 0 && aligned(xp) && aligned(dyp) && aligned(outp);
  if (!evaluation) {
    if (call.channels_last) {
      void* args[] = {&xp, &dyp, &mean_in, &maskp, &partp, &rows, &C};
      launch(module->function("bn_partials"), dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(slices)),
             dim3(32, 8), 0, stream, args, "bn_partials");
    } else {
      void* args[] = {&xp, &dyp, &mean_in, &maskp, &partp, &N, &C, &HW};
      const char* kernel = vec4 ? "bn_partials_nchw4" : "bn_partials_nchw";
      launch(module->function(kernel), dim3(static_cast<unsigned>(C), static_cast<unsigned>(slices)), dim3(256), 0,
             stream, args, kernel);
    }
  }
  {
    const void* w = call.weight->data_ptr();
    const void* b = call.bias->defined() ? call.bias->data_ptr() : nullptr;
    void* out0 = backward ? call.dweight.data_ptr() : evaluation ? nullptr : call.mean.data_ptr();
    void* out1 = backward ? call.dbias.data_ptr() : evaluation ? nullptr : call.invstd.data_ptr();
    const bool running = !backward && call.running_mean->defined();
    void* rm = running ? call.running_mean->data_ptr() : nullptr;
    void* rv = running ? call.running_var->data_ptr() : nullptr;
    int mode = evaluation ? 2 : backward ? 1 : 0;
    double momentum = call.momentum, eps = call.eps;
    void* args[] = {&partp,     &slices, &C,    &rows, &mode, &w,        &b,   &mean_in,
                    &invstd_in, &out0,   &out1, &rm,   &rv,   &momentum, &eps, &coefp};
    launch(module->function("bn_finalize"), dim3(static_cast<unsigned>(ceil_div(C, 256))), dim3(256), 0, stream, args,
           "bn_finalize");
  }
  int relu = call.relu && !backward ? 1 : 0;
  if (call.channels_last) {
    void* args[] = {&xp, &dyp, &outp, &coefp, &maskp, &relu, &n, &C};
    const int64_t blocks = std::min<int64_t>(ceil_div(n, 256), sms * 16);
    launch(module->function("bn_apply"), dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, args, "bn_apply");
  } else {
    void* args[] = {&xp, &dyp, &outp, &coefp, &maskp, &relu, &n, &C, &HW};
    const int64_t blocks = std::min<int64_t>(ceil_div(n, vec4 ? 4096 : 1024), sms * 8);
    const char* kernel = vec4 ? "bn_apply_nchw4" : "bn_apply_nchw";
    launch(module->function(kernel), dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, args, kernel);
  }
  call.relu_done = call.relu;
  return true;
}

}  // namespace kiln::cuda_impl
