// sort/argsort on the GPU (CudaBackend::sort): a stable sort of every row of a
// C-contiguous (rows, n) array, NaN last, as NumPy's kind="stable".
//
// Each element becomes a 64-bit key whose unsigned order is the value order
// (signed integers: the sign bit flipped; floats: widened to double, -0.0 made
// +0.0, negatives' bits inverted, NaN the largest key), and elements compare by
// (key, index in the row): all pairs are distinct, so any correct sort of them is
// the stable sort. Three kernels, generated per input dtype and compiled by NVRTC:
//  - block_sort: one block sorts each 2048-element chunk of a row in shared memory
//    (bitonic network over the padded chunk), writing keys and row indices;
//  - merge_pass: merges neighbouring sorted runs of `width` elements into runs of
//    2 * width: each thread places one element at its run offset plus its rank in
//    the other run (a binary search), log2(n / 2048) passes;
//  - gather: the sorted values (out[j] = row[index[j]]) and the int64 indices.
#include <cuda_runtime.h>

#include <algorithm>
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
#include "kernel_sources/sort.cuh.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cuda_impl {
namespace {

constexpr int kChunk = 2048;  ///< elements a block sorts in shared memory (2048 x 12 bytes = 24 KiB)
constexpr int kThreads = 512;

}  // namespace

std::string sort_source(DType dtype) {
  const bool floating = is_floating(dtype);
  const bool is_signed = dtype == DType::Int8 || dtype == DType::Int16 || dtype == DType::Int32 || dtype == DType::Int64;
  std::string source = device_prelude();
  source += "typedef " + std::string(device_type_name(dtype)) + " T;\n";
  source += "#define KILN_SORT_FLOAT " + std::string(floating ? "1" : "0") + "\n";
  source += "#define KILN_SORT_SIGNED " + std::string(is_signed ? "1" : "0") + "\n";
  return source + std::string(kernel_sources::sort_cuh);
}

namespace {

/// The sort module of `dtype` on `device`, compiled once per process (memory and disk caches behind it).
std::shared_ptr<Module> sort_module(int device, DType dtype) {
  static std::mutex mutex;
  static std::map<std::pair<int, DType>, std::shared_ptr<Module>> modules;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = modules.find({device, dtype}); it != modules.end()) return it->second;
  }
  const std::string source = sort_source(dtype);
  std::shared_ptr<Module> module =
      load_module(source, "sort_" + std::string(dtype_name(dtype)), device);
  std::lock_guard<std::mutex> lock(mutex);
  return modules.try_emplace({device, dtype}, module).first->second;
}

unsigned grid_for_elements(int64_t total, int device) {
  const int64_t blocks = std::max<int64_t>(1, (total + kThreads - 1) / kThreads);
  return static_cast<unsigned>(std::min<int64_t>(blocks, int64_t{multiprocessor_count(device)} * 16));
}

}  // namespace

bool cuda_sort(const detail::SortCall& call) {
  const Array& in = *call.in;
  const int device = in.device().index;
  set_device(device);
  const cudaStream_t stream = current_stream(device);
  const int64_t rows = in.shape(0), n = in.shape(1), total = rows * n;
  if (total == 0) return true;
  if (n > INT32_MAX)
    throw ShapeError("sort: rows of " + std::to_string(n) + " elements are longer than the GPU sort's 2^31 - 1; " +
                     "sort a CPU copy");
  std::shared_ptr<Module> module = sort_module(device, in.dtype());
  const Device d = in.device();
  Array keys = empty({total}, DType::Int64, d), idx = empty({total}, DType::Int32, d);  // keys: uint64 bits
  long long n_arg = n, chunks = (n + kChunk - 1) / kChunk, total_arg = total;
  const void* in_ptr = in.data_ptr();
  void* keys_ptr = keys.data_ptr();
  void* idx_ptr = idx.data_ptr();
  const int64_t blocks = rows * chunks;
  if (blocks > INT32_MAX) throw ShapeError("sort: too many rows x chunks for one launch; sort in pieces");
  void* sort_args[] = {&in_ptr, &keys_ptr, &idx_ptr, &n_arg, &chunks};
  launch(module->function("sort_block"), dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, sort_args,
         "sort_block");
  Array keys2, idx2;  // the merge passes' second buffers (stream-ordered: freed after the queued work)
  if (chunks > 1) {
    keys2 = empty({total}, DType::Int64, d);
    idx2 = empty({total}, DType::Int32, d);
    void* keys2_ptr = keys2.data_ptr();
    void* idx2_ptr = idx2.data_ptr();
    for (long long width = kChunk; width < n; width *= 2) {
      void* args[] = {&keys_ptr, &idx_ptr, &keys2_ptr, &idx2_ptr, &n_arg, &width, &total_arg};
      launch(module->function("sort_merge"), dim3(grid_for_elements(total, device)), dim3(kThreads), 0, stream, args,
             "sort_merge");
      std::swap(keys_ptr, keys2_ptr);
      std::swap(idx_ptr, idx2_ptr);
    }
  }
  void* values_ptr = call.values.defined() ? call.values.data_ptr() : nullptr;
  void* indices_ptr = call.indices.defined() ? call.indices.data_ptr() : nullptr;
  void* gather_args[] = {&in_ptr, &idx_ptr, &values_ptr, &indices_ptr, &n_arg, &total_arg};
  launch(module->function("sort_gather"), dim3(grid_for_elements(total, device)), dim3(kThreads), 0, stream,
         gather_args, "sort_gather");
  return true;
}

}  // namespace kiln::cuda_impl
