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
#include "kiln/kiln.hpp"

namespace kiln::cuda_impl {
namespace {

constexpr int kChunk = 2048;  ///< elements a block sorts in shared memory (2048 x 12 bytes = 24 KiB)
constexpr int kThreads = 512;

const char* kSortSource = R"KILN_SORT(
typedef unsigned long long u64;
__device__ __forceinline__ u64 key_of(T x) {
#if KILN_SORT_FLOAT
  double v = (double)kd::widen(x);
  if (v != v) return 0xffffffffffffffffull;  // NaN last, all NaNs equal (their order is kept)
  if (v == 0.0) v = 0.0;                      // -0.0 == +0.0, as NumPy compares them
  const u64 b = (u64)__double_as_longlong(v);
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
#elif KILN_SORT_SIGNED
  return (u64)(long long)x ^ 0x8000000000000000ull;
#else
  return (u64)x;
#endif
}
__device__ __forceinline__ bool before(u64 ka, int ia, u64 kb, int ib) { return ka < kb || (ka == kb && ia < ib); }

extern "C" __global__ void __launch_bounds__(512) sort_block(const T* __restrict__ in, u64* __restrict__ keys,
                                                            int* __restrict__ idx, long long n, long long chunks) {
  __shared__ u64 sk[2048];
  __shared__ int si[2048];
  const long long row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const long long begin = chunk * 2048;
  const int len = (int)(n - begin < 2048 ? n - begin : 2048);
  int size = 1;
  while (size < len) size <<= 1;
  const T* rin = in + row * n + begin;
  for (int i = threadIdx.x; i < size; i += blockDim.x) {
    if (i < len) {
      sk[i] = key_of(rin[i]);
      si[i] = (int)begin + i;
    } else {
      sk[i] = 0xffffffffffffffffull;  // padding sorts after everything (its index is larger than any real one)
      si[i] = 0x7fffffff;
    }
  }
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int p = i ^ j;
        if (p > i) {
          const bool ascending = (i & k) == 0;
          const bool swap = ascending ? before(sk[p], si[p], sk[i], si[i]) : before(sk[i], si[i], sk[p], si[p]);
          if (swap) {
            const u64 tk = sk[i];
            sk[i] = sk[p];
            sk[p] = tk;
            const int ti = si[i];
            si[i] = si[p];
            si[p] = ti;
          }
        }
      }
      __syncthreads();
    }
  }
  u64* rk = keys + row * n + begin;
  int* ri = idx + row * n + begin;
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    rk[i] = sk[i];
    ri[i] = si[i];
  }
}

extern "C" __global__ void __launch_bounds__(512) sort_merge(const u64* __restrict__ keys, const int* __restrict__ idx,
                                                            u64* __restrict__ keys_out, int* __restrict__ idx_out,
                                                            long long n, long long width, long long total) {
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    const long long row = t / n, j = t % n;
    const long long start = j / (2 * width) * (2 * width);
    const long long mid = start + width < n ? start + width : n;
    const long long end = start + 2 * width < n ? start + 2 * width : n;
    const bool first = j < mid;
    const long long other_begin = first ? mid : start, other_end = first ? end : mid;
    const u64* rk = keys + row * n;
    const int* ri = idx + row * n;
    const u64 k = rk[j];
    const int i = ri[j];
    long long lo = other_begin, hi = other_end;  // elements of the other run that come before (k, i)
    while (lo < hi) {
      const long long m = (lo + hi) >> 1;
      if (before(rk[m], ri[m], k, i)) lo = m + 1; else hi = m;
    }
    const long long pos = start + (j - (first ? start : mid)) + (lo - other_begin);
    keys_out[row * n + pos] = k;
    idx_out[row * n + pos] = i;
  }
}

extern "C" __global__ void __launch_bounds__(512) sort_gather(const T* __restrict__ in, const int* __restrict__ idx,
                                                             T* __restrict__ values, long long* __restrict__ indices,
                                                             long long n, long long total) {
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    const long long row = t / n;
    const int i = idx[t];
    if (values) values[t] = in[row * n + i];
    if (indices) indices[t] = i;
  }
}
)KILN_SORT";

}  // namespace

std::string sort_source(DType dtype) {
  const bool floating = is_floating(dtype);
  const bool is_signed = dtype == DType::Int8 || dtype == DType::Int16 || dtype == DType::Int32 || dtype == DType::Int64;
  std::string source = device_prelude();
  source += "typedef " + std::string(device_type_name(dtype)) + " T;\n";
  source += "#define KILN_SORT_FLOAT " + std::string(floating ? "1" : "0") + "\n";
  source += "#define KILN_SORT_SIGNED " + std::string(is_signed ? "1" : "0") + "\n";
  return source + kSortSource;
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
