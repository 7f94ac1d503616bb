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
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {
namespace {

const char* kBatchNormSource = R"KILN_BN(
// bn_affine is the one place the normalised value is computed: the backward's ReLU mask recomputes it from the
// forward's saved (scale, shift) with the same arithmetic, so the mask is the forward's result > 0 bit for bit.
__device__ __forceinline__ S bn_affine(S v, S scale, S shift) { return v * scale + shift; }
__device__ __forceinline__ bool bn_positive(S r) { return (S)kd::widen(kd::from_wide<IN>(r)) > (S)0; }

// dy masked by the forward's ReLU (mask = its (scale, shift) per channel, or null: no ReLU).
__device__ __forceinline__ S bn_masked(S g, S v, const S* __restrict__ mask, long long c, long long C) {
  return mask != nullptr && !bn_positive(bn_affine(v, mask[c], mask[C + c])) ? (S)0 : g;
}

// Channels-last x viewed as (rows, C).
extern "C" __global__ void __launch_bounds__(256) bn_partials(const IN* __restrict__ x, const IN* __restrict__ dy,
                                                             const S* __restrict__ mean, const S* __restrict__ mask,
                                                             double* __restrict__ part, long long rows, long long C) {
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
        const S v = (S)kd::widen(x[r * C + c]);
        const double g = (double)bn_masked((S)kd::widen(dy[r * C + c]), v, mask, c, C);
        a += g;
        b += g * ((double)v - m);
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

// V consecutive elements of one plane, loaded at once (V = 4 when a plane's size is a multiple of 4 and the
// operands are aligned to 4 elements).
template <int V> struct alignas(V * sizeof(IN)) BnVec { IN v[V]; };
template <int V> __device__ __forceinline__ BnVec<V> bn_load(const IN* __restrict__ p, long long at) {
  return *reinterpret_cast<const BnVec<V>*>(p + at);
}
// x's (and dy's, when given) runs at the four offsets (-1: none), all loads issued before any is used.
template <int V>
__device__ __forceinline__ void bn_load4(const IN* __restrict__ x, const IN* __restrict__ dy, const long long* at,
                                         BnVec<V>* xv, BnVec<V>* gv) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (at[k] < 0) continue;
    xv[k] = bn_load<V>(x, at[k]);
    if (dy != nullptr) gv[k] = bn_load<V>(dy, at[k]);
  }
}

// NCHW x: block (c, slice) sums channel c over the planes [N * slice / slices, N * (slice + 1) / slices), its 256
// threads stepping through those planes' elements in memory order, V at a time, four loads in flight per thread.
template <int V>
__device__ __forceinline__ void bn_partials_nchw_impl(const IN* __restrict__ x, const IN* __restrict__ dy,
                                                      const S* __restrict__ mean, const S* __restrict__ mask,
                                                      double* __restrict__ part, long long N, long long C,
                                                      long long HW) {
  __shared__ double sa[8], sb[8];
  const long long c = blockIdx.x, HWv = HW / V;
  const long long n_end = N * (blockIdx.y + 1) / gridDim.y;
  long long n = N * blockIdx.y / gridDim.y + threadIdx.x / HWv, h = threadIdx.x % HWv;
  const long long n_step = 256 / HWv, h_step = 256 % HWv;
  const double m = dy != nullptr ? (double)mean[c] : 0.0;
  double a = 0.0, b = 0.0;
  while (n < n_end) {
    long long at[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      at[k] = n < n_end ? (n * C + c) * HW + h * V : -1;
      h += h_step;
      n += n_step;
      if (h >= HWv) {
        h -= HWv;
        ++n;
      }
    }
    BnVec<V> xv[4], gv[4];
    bn_load4<V>(x, dy, at, xv, gv);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (at[k] < 0) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (dy == nullptr) {
          const double v = (double)kd::widen(xv[k].v[j]);
          a += v;
          b += v * v;
        } else {
          const S v = (S)kd::widen(xv[k].v[j]);
          const double gm = (double)bn_masked((S)kd::widen(gv[k].v[j]), v, mask, c, C);
          a += gm;
          b += gm * ((double)v - m);
        }
      }
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  if ((threadIdx.x & 31) == 0) {
    sa[threadIdx.x >> 5] = a;
    sb[threadIdx.x >> 5] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < 8; ++k) {
      a += sa[k];
      b += sb[k];
    }
    part[((long long)blockIdx.y * 2) * C + c] = a;
    part[((long long)blockIdx.y * 2 + 1) * C + c] = b;
  }
}

extern "C" __global__ void __launch_bounds__(256) bn_partials_nchw(const IN* __restrict__ x,
                                                                  const IN* __restrict__ dy,
                                                                  const S* __restrict__ mean,
                                                                  const S* __restrict__ mask,
                                                                  double* __restrict__ part, long long N,
                                                                  long long C, long long HW) {
  bn_partials_nchw_impl<1>(x, dy, mean, mask, part, N, C, HW);
}

extern "C" __global__ void __launch_bounds__(256) bn_partials_nchw4(const IN* __restrict__ x,
                                                                   const IN* __restrict__ dy,
                                                                   const S* __restrict__ mean,
                                                                   const S* __restrict__ mask,
                                                                   double* __restrict__ part, long long N,
                                                                   long long C, long long HW) {
  bn_partials_nchw_impl<4>(x, dy, mean, mask, part, N, C, HW);
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

// y = x * scale + shift (then max(y, 0) when relu), or dx from dy (masked when mask is given): the element's
// value from its channel's coefficients.
__device__ __forceinline__ S bn_out(S v, S g, bool backward, const S* __restrict__ coef,
                                    const S* __restrict__ mask, int relu, long long c, long long C) {
  if (!backward) {
    const S r = bn_affine(v, coef[c], coef[C + c]);
    return relu && r < (S)0 ? (S)0 : r;
  }
  const S gm = bn_masked(g, v, mask, c, C);
  return (gm - coef[C + c] - (v - coef[3 * C + c]) * coef[2 * C + c]) * coef[c];
}

// Channels-last: element i's channel is i % C, one division per thread, then stepped along the grid stride.
extern "C" __global__ void __launch_bounds__(256) bn_apply(const IN* __restrict__ x, const IN* __restrict__ dy,
                                                          IN* __restrict__ out, const S* __restrict__ coef,
                                                          const S* __restrict__ mask, int relu, long long n,
                                                          long long C) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long step = stride % C;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long c = i % C;
  for (; i < n; i += stride, c = c + step >= C ? c + step - C : c + step) {
    const S g = dy != nullptr ? (S)kd::widen(dy[i]) : (S)0;
    out[i] = kd::from_wide<IN>(bn_out((S)kd::widen(x[i]), g, dy != nullptr, coef, mask, relu, c, C));
  }
}

// NCHW: element i's channel is (i / HW) % C. Each thread takes four runs of V elements a grid stride apart per
// iteration (four loads in flight: with one element per thread the loads in flight cannot cover memory latency),
// their channels stepped, not divided out.
template <int V>
__device__ __forceinline__ void bn_apply_nchw_impl(const IN* __restrict__ x, const IN* __restrict__ dy,
                                                   IN* __restrict__ out, const S* __restrict__ coef,
                                                   const S* __restrict__ mask, int relu, long long n, long long C,
                                                   long long HW) {
  const long long HWv = HW / V, nv = n / V;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long h_step = stride % HWv, c_step = (stride / HWv) % C;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long h = i % HWv, c = (i / HWv) % C;
  while (i < nv) {
    long long at[4], ch[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      at[k] = i < nv ? i * V : -1;
      ch[k] = c;
      i += stride;
      h += h_step;
      c += c_step;
      if (h >= HWv) {
        h -= HWv;
        ++c;
      }
      if (c >= C) c -= C;
    }
    BnVec<V> xv[4], gv[4];
    bn_load4<V>(x, dy, at, xv, gv);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (at[k] < 0) continue;
      BnVec<V> r;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const S g = dy != nullptr ? (S)kd::widen(gv[k].v[j]) : (S)0;
        r.v[j] = kd::from_wide<IN>(bn_out((S)kd::widen(xv[k].v[j]), g, dy != nullptr, coef, mask, relu, ch[k], C));
      }
      *reinterpret_cast<BnVec<V>*>(out + at[k]) = r;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) bn_apply_nchw(const IN* __restrict__ x, const IN* __restrict__ dy,
                                                               IN* __restrict__ out, const S* __restrict__ coef,
                                                               const S* __restrict__ mask, int relu, long long n,
                                                               long long C, long long HW) {
  bn_apply_nchw_impl<1>(x, dy, out, coef, mask, relu, n, C, HW);
}

extern "C" __global__ void __launch_bounds__(256) bn_apply_nchw4(const IN* __restrict__ x, const IN* __restrict__ dy,
                                                                IN* __restrict__ out, const S* __restrict__ coef,
                                                                const S* __restrict__ mask, int relu, long long n,
                                                                long long C, long long HW) {
  bn_apply_nchw_impl<4>(x, dy, out, coef, mask, relu, n, C, HW);
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
      load_module(batch_norm_source(in, stats), "batch_norm_" + std::string(dtype_name(in)), device);
  std::lock_guard<std::mutex> lock(mutex);
  return modules.try_emplace(key, module).first->second;
}

/// Where NCHW batch norm runs: these kernels, or cuDNN with KILN_BN_NCHW=cudnn (for measuring one against the
/// other; =kiln is the default).
enum class NchwRoute { Cudnn, Kiln };
NchwRoute nchw_route() {
  static const NchwRoute route = [] {
    const char* env = std::getenv("KILN_BN_NCHW");
    if (env == nullptr || *env == '\0') return NchwRoute::Kiln;
    if (std::strcmp(env, "cudnn") == 0) return NchwRoute::Cudnn;
    if (std::strcmp(env, "kiln") == 0) return NchwRoute::Kiln;
    throw ValueError(std::string("KILN_BN_NCHW is '") + env +
                     "': set it to cudnn (cuDNN's batch norm for NCHW arrays) or kiln (kiln's kernels), or unset it");
  }();
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
