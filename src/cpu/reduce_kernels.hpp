// The inner loops of the CPU reductions and their split over threads (internal to src/cpu): reduce.cpp walks
// arrays with them, fused.cpp feeds them the values a fused function computes, so fused and unfused sums share
// accumulators, order within a run and the way a large reduction is split over threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/backend.hpp"
#include "cpu/parallel.hpp"

namespace kiln::cpu_impl {

/// One reduction's loops over input type T into its accumulator type A (see reduce.cpp's top comment).
struct ReduceKernels {
  /// *acc = op(*acc, op over in[0], in[stride], ..., in[(n-1)*stride]), with 256 bytes of partial accumulators.
  void (*reduce_run)(void* acc, const void* in, int64_t n, int64_t stride);
  /// acc[j * acc_stride] = op(acc[j * acc_stride], in[j * in_stride]) for j < n.
  void (*accumulate_run)(void* acc, int64_t acc_stride, const void* in, int64_t n, int64_t in_stride);
  /// acc[j] = op(acc[j], in[r * row_stride + j] for r < rows) for j < n.
  void (*accumulate_rows)(void* acc, const void* in, int64_t n, int64_t rows, int64_t row_stride);
  void (*init)(void* acc, int64_t n);                      ///< acc[i] = the op's identity
  void (*combine)(void* dst, const void* src, int64_t n);  ///< dst[i] = op(dst[i], src[i])
  int64_t acc_itemsize;
  DType acc_dtype;  ///< the dtype whose bits the accumulator holds (uint64 sums read as int64, uint8 truth as bool)
  void (*finalize)(void* acc, int64_t n);  ///< applied to the finished accumulators (norm's sqrt); may be null
};

/// The kernels of `op` (a kernel row of kiln/reductions.def) over `dtype` into `out_dtype` (a floating out_dtype
/// makes integer sums accumulate in double, as mean's float64 sum). Throws ValueError for argmax/argmin.
ReduceKernels select_kernels(detail::ReduceOp op, DType dtype, DType out_dtype);

/// Which axis of a reduction's walk to split over `threads`: the largest kept one when it is big enough, when
/// the reduced ones are too short, or when a private accumulator buffer per thread would be too large; else the
/// largest reduced one. `dims` has `size` and `reduced` members; an axis of each kind may be missing.
struct ReductionSplit {
  size_t axis = 0;
  bool kept = false;  ///< a kept axis: the chunks write disjoint accumulators
};
template <class Dims>
ReductionSplit choose_reduction_split(const Dims& dims, int threads, int64_t acc_count) {
  int kept = -1, red = -1;
  for (size_t d = 0; d < dims.size(); ++d) {
    int& best = dims[d].reduced ? red : kept;
    if (best < 0 || dims[d].size > dims[static_cast<size_t>(best)].size) best = static_cast<int>(d);
  }
  const int64_t kept_size = kept >= 0 ? dims[static_cast<size_t>(kept)].size : 0;
  const int64_t red_size = red >= 0 ? dims[static_cast<size_t>(red)].size : 0;
  // Splitting a kept axis needs no extra memory; splitting a reduced one needs a private buffer per thread.
  const bool split_kept = kept >= 0 && (kept_size >= 4 * threads || red_size < 2 * threads ||
                                        acc_count * static_cast<int64_t>(threads) > (int64_t{1} << 22));
  return {static_cast<size_t>(split_kept ? kept : std::max(red, 0)), split_kept};
}

/// Runs run(c, target) for every chunk c < chunks of a split reduced axis over the threads: chunk 0 accumulates
/// into `acc`, the others into private accumulators (k.init) that are combined into `acc` afterwards.
template <class F>
void reduce_chunks_privately(const ReduceKernels& k, char* acc, int64_t acc_count, int64_t chunks, F&& run) {
  const size_t words = static_cast<size_t>((acc_count * k.acc_itemsize + 7) / 8);
  std::vector<std::vector<uint64_t>> privates(static_cast<size_t>(chunks - 1), std::vector<uint64_t>(words));
  parallel_chunks(chunks, [&](int64_t c) {
    char* target = acc;
    if (c > 0) {
      target = reinterpret_cast<char*>(privates[static_cast<size_t>(c - 1)].data());
      k.init(target, acc_count);
    }
    run(c, target);
  });
  for (const auto& buffer : privates) k.combine(acc, buffer.data(), acc_count);
}

}  // namespace kiln::cpu_impl
