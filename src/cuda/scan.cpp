// cumsum/cumprod on the GPU (CudaBackend::scan): an inclusive scan along axis 1 of a C-contiguous
// (outer, n, inner) array, accumulated in float64 (floats) or wrapping int64 (bool and integers), each
// element rounded once to the output dtype, as the CPU does. Three kernels, generated per (op, input dtype,
// output dtype) and compiled by NVRTC:
//  - scan_columns: one thread per line (outer x inner lines), walking it in order: adjacent threads read
//    adjacent elements when inner > 1, and every line is summed in NumPy's sequential order;
//  - scan_totals: for a few long contiguous lines (inner == 1) split into segments, each block reduces one
//    segment to its total;
//  - scan_segments: one block per (line, segment): the segment's starting carry is the combination of the
//    earlier segments' totals, then 1024-element chunks are loaded into shared memory (coalesced), scanned
//    per thread (4 elements), across each warp (shuffles) and across the block's 8 warps, written out, and
//    the chunk's total carried to the next chunk.
// The core moves the axis last when the lines across an inner axis are few (src/core/scan.cpp), so a long
// line is always contiguous here when it needs segments.
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
#include "kiln/kiln.hpp"

namespace kiln::cuda_impl {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 4;                          ///< elements per thread per chunk
constexpr int64_t kChunk = int64_t{kThreads} * kItems;  ///< elements a block scans at once (1024)

const char* kScanSource = R"KILN_SCAN(
__device__ __forceinline__ ACC identity() { return (ACC)(KILN_SCAN_PROD ? 1 : 0); }
__device__ __forceinline__ ACC combine(ACC a, ACC b) {
#if KILN_SCAN_INT  // wrapping 64-bit arithmetic, as NumPy's int64 accumulation
  return (ACC)(KILN_SCAN_PROD ? (unsigned long long)a * (unsigned long long)b
                              : (unsigned long long)a + (unsigned long long)b);
#else
  return KILN_SCAN_PROD ? a * b : a + b;
#endif
}
__device__ __forceinline__ ACC load(IN x) { return (ACC)kd::widen(x); }

extern "C" __global__ void __launch_bounds__(256) scan_columns(const IN* __restrict__ x, OUT* __restrict__ y,
                                                              long long lines, long long n, long long inner) {
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < lines;
       t += (long long)gridDim.x * blockDim.x) {
    const long long o = t / inner, i = t - o * inner;
    const long long base = o * n * inner + i;
    ACC running = identity();
    for (long long k = 0; k < n; ++k) {
      running = combine(running, load(x[base + k * inner]));
      y[base + k * inner] = kd::cast<OUT>(running);
    }
  }
}

/// The segment [begin, end) of line `line` of the block (blockIdx.x = line * segments + segment).
__device__ __forceinline__ void segment_of(long long n, long long segments, long long segment_length,
                                           long long& line, long long& segment, long long& begin, long long& end) {
  line = blockIdx.x / segments;
  segment = blockIdx.x - line * segments;
  begin = segment * segment_length;
  end = begin + segment_length < n ? begin + segment_length : n;
}

extern "C" __global__ void __launch_bounds__(256) scan_totals(const IN* __restrict__ x, ACC* __restrict__ totals,
                                                             long long n, long long segments,
                                                             long long segment_length) {
  long long line, segment, begin, end;
  segment_of(n, segments, segment_length, line, segment, begin, end);
  const IN* row = x + line * n;
  ACC acc = identity();
  for (long long k = begin + threadIdx.x; k < end; k += blockDim.x) acc = combine(acc, load(row[k]));
  __shared__ ACC warp_totals[8];
  for (int m = 16; m > 0; m /= 2) acc = combine(acc, __shfl_xor_sync(0xffffffffu, acc, m));
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    ACC total = identity();
    for (int w = 0; w < 8; ++w) total = combine(total, warp_totals[w]);
    totals[blockIdx.x] = total;
  }
}

extern "C" __global__ void __launch_bounds__(256) scan_segments(const IN* __restrict__ x, OUT* __restrict__ y,
                                                               long long n, long long segments,
                                                               long long segment_length,
                                                               const ACC* __restrict__ totals) {
  long long line, segment, begin, end;
  segment_of(n, segments, segment_length, line, segment, begin, end);
  const IN* row = x + line * n;
  OUT* out = y + line * n;
  __shared__ ACC buf[1024];
  __shared__ ACC warp_totals[8];
  __shared__ ACC start;
  if (threadIdx.x == 0) {  // the earlier segments' totals, in order
    ACC c = identity();
    if (totals != 0)
      for (long long s = 0; s < segment; ++s) c = combine(c, totals[line * segments + s]);
    start = c;
  }
  __syncthreads();
  ACC carry = start;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (long long chunk = begin; chunk < end; chunk += 1024) {
    for (int j = threadIdx.x; j < 1024; j += 256) buf[j] = chunk + j < end ? load(row[chunk + j]) : identity();
    __syncthreads();
    ACC local = identity();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      local = combine(local, buf[threadIdx.x * 4 + k]);
      buf[threadIdx.x * 4 + k] = local;
    }
    ACC inclusive = local;  // across the warp
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const ACC u = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive = combine(u, inclusive);
    }
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {  // across the block's warps
      ACC w = lane < 8 ? warp_totals[lane] : identity();
#pragma unroll
      for (int d = 1; d < 8; d *= 2) {
        const ACC u = __shfl_up_sync(0xffffffffu, w, d);
        if (lane >= d) w = combine(u, w);
      }
      if (lane < 8) warp_totals[lane] = w;
    }
    __syncthreads();
    ACC exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
    if (lane == 0) exclusive = identity();
    const ACC prefix = combine(carry, combine(warp > 0 ? warp_totals[warp - 1] : identity(), exclusive));
#pragma unroll
    for (int k = 0; k < 4; ++k) buf[threadIdx.x * 4 + k] = combine(prefix, buf[threadIdx.x * 4 + k]);
    __syncthreads();
    for (int j = threadIdx.x; j < 1024; j += 256)
      if (chunk + j < end) out[chunk + j] = kd::cast<OUT>(buf[j]);
    carry = combine(carry, warp_totals[7]);
    __syncthreads();
  }
}
)KILN_SCAN";

using ModuleKey = std::tuple<int, detail::ReduceOp, DType, DType>;

/// The scan module of (op, in, out) on `device`, compiled once per process (memory and disk caches behind it).
std::shared_ptr<Module> scan_module(int device, detail::ReduceOp op, DType in, DType out) {
  static std::mutex mutex;
  static std::map<ModuleKey, std::shared_ptr<Module>> modules;
  const ModuleKey key{device, op, in, out};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = modules.find(key); it != modules.end()) return it->second;
  }
  std::shared_ptr<Module> module =
      load_module(scan_source(op, in, out),
                  std::string(detail::reduce_op_name(op)) + "_" + std::string(dtype_name(in)) + "_" +
                      std::string(dtype_name(out)),
                  device);
  std::lock_guard<std::mutex> lock(mutex);
  return modules.try_emplace(key, module).first->second;
}

}  // namespace

std::string scan_source(detail::ReduceOp op, DType in, DType out) {
  if (op != detail::ReduceOp::CumSum && op != detail::ReduceOp::CumProd)
    throw ValueError(std::string("cuda scan: ") + detail::reduce_op_name(op) + " is not a scan");
  const bool floating = is_floating(in);
  std::string source = device_prelude();
  source += "typedef " + std::string(device_type_name(in)) + " IN;\n";
  source += "typedef " + std::string(device_type_name(out)) + " OUT;\n";
  source += std::string("typedef ") + (floating ? "double" : "long long") + " ACC;\n";
  source += "#define KILN_SCAN_PROD " + std::string(op == detail::ReduceOp::CumProd ? "1" : "0") + "\n";
  source += "#define KILN_SCAN_INT " + std::string(floating ? "0" : "1") + "\n";
  return source + kScanSource;
}

void cuda_scan(const detail::ScanCall& call) {
  const Array& in = *call.in;
  const int device = in.device().index;
  set_device(device);
  const cudaStream_t stream = current_stream(device);
  long long outer = in.shape(0), n = in.shape(1), inner = in.shape(2);
  if (in.size() == 0) return;
  std::shared_ptr<Module> module = scan_module(device, call.op, in.dtype(), call.out.dtype());
  const void* x = in.data_ptr();
  void* y = call.out.data_ptr();
  const int64_t sms = multiprocessor_count(device);
  long long lines = outer * inner;
  // A thread per line when the lines are strided (inner > 1: adjacent threads read adjacent elements; the
  // core guarantees many lines then) or short.
  if (inner > 1 || n < 512) {
    void* args[] = {&x, &y, &lines, &n, &inner};
    const int64_t blocks = std::min<int64_t>(ceil_div(lines, kThreads), sms * 32);
    launch(module->function("scan_columns"), dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, args,
           "scan_columns");
    return;
  }
  // Contiguous lines: a block per segment of each line, with enough segments to give every SM 4 blocks.
  long long segments = std::clamp<int64_t>(ceil_div(sms * 4, lines), 1, ceil_div(n, 4 * kChunk));
  long long segment_length = ceil_div(ceil_div(n, segments), kChunk) * kChunk;
  segments = ceil_div(n, segment_length);
  const int64_t blocks = lines * segments;
  if (blocks > INT32_MAX)
    throw ShapeError(std::string(detail::reduce_op_name(call.op)) + ": " + std::to_string(lines) +
                     " lines are more than one launch takes; scan in pieces");
  Array totals;  // stream-ordered: freed after the queued work
  const void* totals_ptr = nullptr;
  if (segments > 1) {
    totals = empty({blocks}, is_floating(in.dtype()) ? DType::Float64 : DType::Int64, in.device());
    void* t = totals.data_ptr();
    void* args[] = {&x, &t, &n, &segments, &segment_length};
    launch(module->function("scan_totals"), dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, args,
           "scan_totals");
    totals_ptr = t;
  }
  void* args[] = {&x, &y, &n, &segments, &segment_length, &totals_ptr};
  launch(module->function("scan_segments"), dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, args,
         "scan_segments");
}

}  // namespace kiln::cuda_impl
