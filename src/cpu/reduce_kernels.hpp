// The inner loops of the CPU reductions (internal to src/cpu): reduce.cpp walks arrays with them, fused.cpp
// feeds them the values a fused function computes, so fused and unfused sums share accumulators and order
// within a run.
#pragma once

#include <cstdint>

#include "core/backend.hpp"

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

}  // namespace kiln::cpu_impl
