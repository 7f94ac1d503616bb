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
#include "kernel_sources/scan.cuh.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cuda_impl {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 4;                          ///< elements per thread per chunk
constexpr int64_t kChunk = int64_t{kThreads} * kItems;  ///< elements a block scans at once (1024)

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
  return source + std::string(kernel_sources::scan_cuh);
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
