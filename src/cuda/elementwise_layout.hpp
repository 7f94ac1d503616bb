// Host-side layout helpers shared by the elementwise launchers (internal): the
// built-in ops (elementwise.cpp), fused kernels (fusion.cpp) and user
// ElementwiseKernels (user_kernels.cpp) coalesce their operands' axes, pick
// 32-bit indexing, pass scalars, size grids and fill the strided kernels' Params
// words the same way (codegen.hpp documents the words).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "cuda/codegen.hpp"
#include "kiln/array.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {

/// Most operands (output included) of one fused elementwise problem.
inline constexpr int kMaxLayoutOperands = 16;

/// The problem after coalescing: shape and per-operand element strides (output first for built-ins).
template <int MaxOperands>
struct StridedLayout {
  static constexpr int kMaxOperands = MaxOperands;
  int ndim = 0;
  int operands = 0;
  int64_t shape[kMaxKernelRank];
  int64_t strides[MaxOperands][kMaxKernelRank];
};

/// An op's name for an error message: a C string, or a callable that builds it (called only when throwing).
inline std::string op_label(const char* op) { return op; }
template <class F>
std::string op_label(const F& op) {
  return op();
}

/// Merges axes (the shape's C order, so a flat index keeps its C-order meaning) where every operand steps
/// uniformly; drops size-1 axes. `arrays` are layout.operands arrays of shape `shape` (broadcast views).
/// Throws ShapeError naming `op` (see op_label) when more than kMaxKernelRank axes remain.
template <int M, class Op>
void coalesce(StridedLayout<M>& layout, const Shape& shape, const Array* const* arrays, const Op& op) {
  layout.ndim = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const int nd = layout.ndim;
    if (nd > 0) {
      bool merge = true;
      for (int k = 0; k < layout.operands && merge; ++k)
        merge = layout.strides[k][nd - 1] == arrays[k]->strides()[d] * shape[d];
      if (merge) {
        layout.shape[nd - 1] *= shape[d];
        for (int k = 0; k < layout.operands; ++k) layout.strides[k][nd - 1] = arrays[k]->strides()[d];
        continue;
      }
    }
    if (nd == kMaxKernelRank)
      throw ShapeError(op_label(op) + ": the operands' layouts leave more than " + std::to_string(kMaxKernelRank) +
                       " axes that cannot be merged (shape " + shape_str(shape) +
                       "); make an operand contiguous first (.contiguous())");
    layout.shape[nd] = shape[d];
    for (int k = 0; k < layout.operands; ++k) layout.strides[k][nd] = arrays[k]->strides()[d];
    ++layout.ndim;
  }
  if (layout.ndim == 0) {
    layout.ndim = 1;
    layout.shape[0] = 1;
    for (int k = 0; k < layout.operands; ++k) layout.strides[k][0] = 0;
  }
}

/// Whether every operand's offsets (in elements) stay within a signed 32-bit range.
template <int M>
bool offsets_fit_32(const StridedLayout<M>& layout) {
  for (int k = 0; k < layout.operands; ++k) {
    int64_t extent = 0;
    for (int d = 0; d < layout.ndim; ++d) {
      const int64_t s = layout.strides[k][d] < 0 ? -layout.strides[k][d] : layout.strides[k][d];
      extent += (layout.shape[d] - 1) * s;
      if (extent > INT32_MAX) return false;
    }
  }
  return true;
}

/// Whether the layout is one axis over which every operand has stride 1 (or a single element).
template <int M>
bool is_contiguous_layout(const StridedLayout<M>& layout, int64_t n) {
  if (n == 1) return true;
  if (layout.ndim != 1) return false;
  for (int k = 0; k < layout.operands; ++k)
    if (layout.strides[k][0] != 1) return false;
  return true;
}

/// The vector width (elements) of a contiguous kernel over `operands` arrays: 16 bytes of the widest operand,
/// halved until every pointer (`pointers[k]`, the data of `arrays[k]`) is aligned for its part of a vector
/// (vec * itemsize bytes); 1 when no wider vector fits.
inline int aligned_vector_width(const Array* const* arrays, void* const* pointers, int operands) {
  int64_t widest = 1;
  for (int k = 0; k < operands; ++k) widest = std::max(widest, itemsize(arrays[k]->dtype()));
  int vec = static_cast<int>(16 / widest);
  for (; vec > 1; vec /= 2) {
    bool aligned = true;
    for (int k = 0; k < operands; ++k)
      aligned = aligned && reinterpret_cast<uintptr_t>(pointers[k]) % (vec * itemsize(arrays[k]->dtype())) == 0;
    if (aligned) break;
  }
  return vec;
}

/// Params words of a strided kernel with 32-bit indices: size[ndim], magic[ndim], shift[ndim] (division by
/// invariant integers), then stride[operand][ndim]. Returns the number of words.
template <int M>
int strided_words32(const StridedLayout<M>& layout, uint32_t* words) {
  const int nd = layout.ndim;
  for (int d = 0; d < nd; ++d) {
    // Division by the invariant size: q = (umulhi(n, magic) + n) >> shift for n < 2^31.
    const uint64_t divisor = static_cast<uint64_t>(layout.shape[d]);
    uint32_t shift = 0;
    while ((uint64_t{1} << shift) < divisor) ++shift;
    words[d] = static_cast<uint32_t>(divisor);
    words[nd + d] = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
    words[2 * nd + d] = shift;
  }
  for (int k = 0; k < layout.operands; ++k)
    for (int d = 0; d < nd; ++d)
      words[3 * nd + k * nd + d] = static_cast<uint32_t>(static_cast<int32_t>(layout.strides[k][d]));
  return 3 * nd + layout.operands * nd;
}

/// Params words with 64-bit indices: size[ndim], then stride[operand][ndim]. Returns the number of words.
template <int M>
int strided_words64(const StridedLayout<M>& layout, uint64_t* words) {
  const int nd = layout.ndim;
  for (int d = 0; d < nd; ++d) words[d] = static_cast<uint64_t>(layout.shape[d]);
  for (int k = 0; k < layout.operands; ++k)
    for (int d = 0; d < nd; ++d) words[nd + k * nd + d] = static_cast<uint64_t>(layout.strides[k][d]);
  return nd + layout.operands * nd;
}

/// The Params words for `layout`: fills `words32` or `words64` (room for 3*kMaxKernelRank + M*kMaxKernelRank
/// words) and returns a pointer to the one used.
template <int M>
void* strided_params(const StridedLayout<M>& layout, bool index64, uint32_t* words32, uint64_t* words64) {
  if (index64) {
    strided_words64(layout, words64);
    return words64;
  }
  strided_words32(layout, words32);
  return words32;
}

/// How a fused or user reduction spreads over the GPU (src/cuda/reduce.cpp plans the built-in ones).
struct SplitPlan {
  int group = 1;        ///< threads per (output, split) task: 1..32 (power of two) or kBlockSize
  int64_t splits = 1;   ///< tasks per output (> 1: a second pass reduces the partials)
  int64_t chunk = 1;    ///< reduced elements per split
  int64_t wave = 1;     ///< blocks of one wave (8 resident kBlockSize-thread blocks per multiprocessor)
};

/// Plans a reduction of `num_out` outputs over `num_red` elements each on `multiprocessors` SMs. `rows`: the
/// reduced axes are the inner ones in memory, so a group of threads takes each output (a (sub-)warp when
/// outputs are many or rows short, else the block, split when outputs are fewer than a wave of blocks);
/// otherwise one thread per output, adjacent threads on adjacent outputs, the reduced range split when outputs
/// are fewer than the resident threads.
inline SplitPlan plan_split(bool rows, int64_t num_out, int64_t num_red, int multiprocessors) {
  SplitPlan plan;
  plan.wave = static_cast<int64_t>(multiprocessors) * 8;
  const int64_t resident = plan.wave * kBlockSize;
  int64_t splits = 1;
  if (rows) {
    plan.group = num_red <= 32 || num_out * 32 >= resident ? pow2_at_least(num_red, 32) : kBlockSize;
    if (plan.group == kBlockSize && num_out < plan.wave)
      splits = std::min(ceil_div(plan.wave, num_out), ceil_div(num_red, 4096));
  } else if (num_out < resident) {
    splits = std::min(ceil_div(resident, num_out), ceil_div(num_red, 64));
  }
  splits = std::max<int64_t>(1, splits);
  plan.chunk = std::max<int64_t>(1, ceil_div(num_red, splits));
  plan.splits = std::max<int64_t>(1, ceil_div(num_red, plan.chunk));
  return plan;
}

/// The layout of built-in and fused elementwise problems.
using Layout = StridedLayout<kMaxLayoutOperands>;

/// Writes `value` converted to `t` (a kernel-argument dtype: no 16-bit floats) into `slot` (8 bytes).
void store_scalar(DType t, const Scalar& value, void* slot);

/// Blocks for `work_items` threads' worth of work: at most one wave of resident blocks (the kernels loop).
unsigned grid_for(int device, int64_t work_items, const KernelTable::Entry& kernel);

/// Blocks for a contiguous kernel so that each thread takes `per_thread` work items once (its grid-stride loop
/// runs one iteration). Memory-bound kernels stream better this way than with one wave of resident blocks: on an
/// H200 a fused tanh/exp chain ran at 1.01x its bandwidth floor against 1.16x (bench/bench_fusion_variants.cpp).
unsigned one_pass_grid(int64_t work_items, int per_thread);

}  // namespace kiln::cuda_impl
