// The host side of generated elementwise kernels (internal), shared by the built-in
// ops (elementwise.cpp) and fused kernels (fusion.cpp): coalescing the operands'
// axes, the index width, scalar kernel arguments, grid sizes and the Params words
// of strided kernels (codegen.hpp documents the layout).
#pragma once

#include <cstdint>

#include "cuda/codegen.hpp"
#include "kiln/array.hpp"

namespace kiln::cuda_impl {

/// Most operands (output included) of one elementwise problem.
inline constexpr int kMaxLayoutOperands = 16;

/// The problem after coalescing: shape and per-operand element strides, output first.
struct Layout {
  int ndim = 0;
  int operands = 0;
  int64_t shape[kMaxKernelRank];
  int64_t strides[kMaxLayoutOperands][kMaxKernelRank];
};

/// Merges axes (output's C order) where every operand steps uniformly; drops size-1 axes. `arrays` holds
/// layout.operands arrays of `shape`. Throws ShapeError naming `op` when more than kMaxKernelRank axes remain.
void coalesce(Layout& layout, const Shape& shape, const Array* const* arrays, const char* op);
/// Whether every operand's offsets (in elements) stay within a signed 32-bit range.
bool offsets_fit_32(const Layout& layout);
/// Writes `value` converted to `t` (a kernel-argument dtype: no 16-bit floats) into `slot` (8 bytes).
void store_scalar(DType t, const Scalar& value, void* slot);
/// Blocks for `work_items` threads' worth of work: at most one wave of resident blocks (the kernels loop).
unsigned grid_for(int device, int64_t work_items, const KernelTable::Entry& kernel);
/// Params words of a strided kernel with 32-bit indices: size[ndim], magic[ndim], shift[ndim] (division by
/// invariant integers), then stride[operand][ndim]. Returns the number of words.
int strided_words32(const Layout& layout, uint32_t* words);
/// Params words with 64-bit indices: size[ndim], then stride[operand][ndim]. Returns the number of words.
int strided_words64(const Layout& layout, uint64_t* words);

}  // namespace kiln::cuda_impl
