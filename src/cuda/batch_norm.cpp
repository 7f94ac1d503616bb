// Batch normalisation of channels-last arrays on the GPU (training forward and backward, evaluation), where
// cuDNN's descriptor API is slow: on an H200 at batch 128, 256 channels at 56x56, bfloat16, cuDNN took 13 ms
// forward and 19 ms backward in either spatial mode (these kernels: 0.31 / 0.60 ms; float32 NCHW in cuDNN:
// 0.43 / 0.75 ms) and 275 us in evaluation (these: 200 us). NCHW stays with cuDNN: a kernel of kiln's for NCHW
// evaluation won at 56x56 (276 against 295 us) but lost on the small deep planes (ResNet-50 inference 18.3
// against 17.8 ms), and was removed. A channels-last x is viewed as
// (rows = N*H*W, C) with C contiguous. Up to three kernels per step, generated per (x dtype, statistics dtype)
// and compiled by NVRTC:
//  - bn_partials: a (32 channels x 8 rows) block per (channel tile, row slice) sums, in float64, x and x^2
//    (forward) or dy and dy * (x - mean) (backward) over its rows; a warp reads 32 adjacent channels of a row;
//  - bn_finalize: a thread per channel adds the slices' partial sums and writes the statistics (mean, invstd,
//    the running averages with the unbiased variance; or dweight, dbias) and the per-channel coefficients
//    (evaluation: the coefficients from the running statistics, no partial sums);
//  - bn_apply: y = x * scale + shift, or dx = (dy - dbias / M - (x - mean) * dweight * invstd / M) * weight *
//    invstd, one element per thread, in the statistics dtype (the channel stepped along the grid-stride loop,
//    not divided out per element). A 16-byte-vector variant of bn_apply (8 bfloat16 channels per thread) and
//    four rows per iteration in bn_partials were tried and were slower on an H200 (256 channels at 56x56,
//    bfloat16: evaluation 243 against 199 us, backward 706 against 613 us), and were removed.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/backend.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"

namespace kiln::cuda_impl {
namespace {

const char* kBatchNormSource = R"KILN_BN(
extern "C" __global__ void __launch_bounds__(256) bn_partials(const IN* __restrict__ x, const IN* __restrict__ dy,
                                                             const S* __restrict__ mean, double* __restrict__ part,
                                                             long long rows, long long C) {
  __shared__ double sa[8][33], sb[8][33];
  const long long c = (long long)blockIdx.x * 32 + threadIdx.x;
  double a = 0.0, b = 0.0;
  if (c < C) {
    if (dy == nullptr) {
      for (long long r = (long long)blockIdx.y * 8 + threadIdx.y; r < rows; r += (long long)gridDim.y * 8) {
        const double v = (double)kd::widen(x[r * C + c]);
        a += v;
        b += v * v;
      }
    } else {
      const double m = (double)mean[c];
      for (long long r = (long long)blockIdx.y * 8 + threadIdx.y; r < rows; r += (long long)gridDim.y * 8) {
        const double g = (double)kd::widen(dy[r * C + c]);
        a += g;
        b += g * ((double)kd::widen(x[r * C + c]) - m);
      }
    }
  }
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; ++k) {
      a += sa[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
    part[((long long)blockIdx.y * 2) * C + c] = a;
    part[((long long)blockIdx.y * 2 + 1) * C + c] = b;
  }
}

// Forward: stats = (mean, invstd) out, running averages updated, coef = (scale, shift).
// Backward: stats = (dweight, dbias) out, coef = (a, b, cc, mean) with dx = (dy - b - (x - mean) * cc) * a.
extern "C" __global__ void bn_finalize(const double* __restrict__ part, int slices, long long C, long long rows,
                                       int backward /* 0 forward, 1 backward, 2 evaluation */, const S* __restrict__ weight, const S* __restrict__ bias,
                                       const S* __restrict__ mean_in, const S* __restrict__ invstd_in,
                                       S* __restrict__ out0, S* __restrict__ out1, S* __restrict__ running_mean,
                                       S* __restrict__ running_var, double momentum, double eps,
                                       S* __restrict__ coef) {
  const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double a = 0.0, b = 0.0;
  for (int s = 0; backward != 2 && s < slices; ++s) {
    a += part[((long long)s * 2) * C + c];
    b += part[((long long)s * 2 + 1) * C + c];
  }
  const double m = (double)rows;
  const double w = (double)weight[c];
  if (backward == 2) {  // evaluation: the running statistics
    const double inv = 1.0 / sqrt((double)running_var[c] + eps);
    coef[c] = (S)(w * inv);
    coef[C + c] = (S)((double)bias[c] - (double)running_mean[c] * w * inv);
    return;
  }
  if (!backward) {
    const double mu = a / m;
    const double var = fmax(b / m - mu * mu, 0.0);
    const double inv = 1.0 / sqrt(var + eps);
    out0[c] = (S)mu;
    out1[c] = (S)inv;
    if (running_mean != nullptr) {
      running_mean[c] = (S)((1.0 - momentum) * (double)running_mean[c] + momentum * mu);
      running_var[c] = (S)((1.0 - momentum) * (double)running_var[c] + momentum * var * m / (m - 1.0));
    }
    coef[c] = (S)(w * inv);
    coef[C + c] = (S)((double)bias[c] - mu * w * inv);
  } else {
    const double inv = (double)invstd_in[c];
    const double dweight = b * inv;  // sum dy * (x - mean) * invstd
    out0[c] = (S)dweight;
    out1[c] = (S)a;
    coef[c] = (S)(w * inv);
    coef[C + c] = (S)(a / m);
    coef[2 * C + c] = (S)(dweight * inv / m);
    coef[3 * C + c] = mean_in[c];
  }
}

extern "C" __global__ void __launch_bounds__(256) bn_apply(const IN* __restrict__ x, const IN* __restrict__ dy,
                                                          IN* __restrict__ out, const S* __restrict__ coef,
                                                          long long n, long long C) {
  // The channel of element i is i % C: one division per thread, then stepped (the stride's remainder added).
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long step = stride % C;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long c = i % C;
  for (; i < n; i += stride, c = c + step >= C ? c + step - C : c + step) {
    const S v = (S)kd::widen(x[i]);
    S r;
    if (dy == nullptr) {
      r = v * coef[c] + coef[C + c];
    } else {
      r = ((S)kd::widen(dy[i]) - coef[C + c] - (v - coef[3 * C + c]) * coef[2 * C + c]) * coef[c];
    }
    out[i] = kd::from_wide<IN>(r);
  }
}

)KILN_BN";

using ModuleKey = std::tuple<int, DType, DType>;

}  // namespace

std::string batch_norm_source(DType in, DType stats) {
  std::string source = device_prelude();
  source += "typedef " + std::string(device_type_name(in)) + " IN;\n";
  source += "typedef " + std::string(device_type_name(stats)) + " S;\n";
  return source + kBatchNormSource;
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
      load_module(batch_norm_source(in, stats), "batch_norm_nhwc_" + std::string(dtype_name(in)), device);
  std::lock_guard<std::mutex> lock(mutex);
  return modules.try_emplace(key, module).first->second;
}

}  // namespace

bool cuda_batch_norm_kernels(detail::BatchNormCall& call) {
  using detail::BatchNormKind;
  const Array& x = *call.x;
  const DType stats = call.weight->dtype();
  const bool evaluation = call.kind == BatchNormKind::Evaluation;
  if (!call.channels_last || (stats != DType::Float32 && stats != DType::Float64)) return false;
  const int device = x.device().index;
  const cudaStream_t stream = current_stream(device);
  std::shared_ptr<Module> module = bn_module(device, x.dtype(), stats);
  long long C = x.shape(1);
  long long rows = x.size() / C;
  long long n = x.size();
  const int64_t sms = multiprocessor_count(device);
  const int64_t tiles = ceil_div(C, 32);
  int slices = static_cast<int>(std::clamp<int64_t>(4 * sms / tiles, 1, std::min<int64_t>(ceil_div(rows, 64), 65535)));
  const bool backward = call.kind == BatchNormKind::Backward;
  std::shared_ptr<Storage> part =
      evaluation ? nullptr : device_alloc(device, sizeof(double) * 2 * static_cast<size_t>(slices * C), stream);
  std::shared_ptr<Storage> coef =
      device_alloc(device, static_cast<size_t>(itemsize(stats)) * 4 * static_cast<size_t>(C), stream);
  const void* xp = x.data_ptr();
  const void* dyp = backward ? call.dy->data_ptr() : nullptr;
  const void* mean_in = backward ? call.mean.data_ptr() : nullptr;
  const void* invstd_in = backward ? call.invstd.data_ptr() : nullptr;
  void* partp = part ? part->data() : nullptr;
  void* coefp = coef->data();
  if (!evaluation) {
    void* args[] = {&xp, &dyp, &mean_in, &partp, &rows, &C};
    launch(module->function("bn_partials"), dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(slices)),
           dim3(32, 8), 0, stream, args, "bn_partials");
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
  void* outp = backward ? call.dx.data_ptr() : call.y.data_ptr();
  void* args[] = {&xp, &dyp, &outp, &coefp, &n, &C};
  const int64_t blocks = std::min<int64_t>(ceil_div(n, 256), sms * 16);
  launch(module->function("bn_apply"), dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, args, "bn_apply");
  return true;
}

}  // namespace kiln::cuda_impl
