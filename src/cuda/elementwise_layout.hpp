// Host-side layout helpers shared by the elementwise launchers (internal): the
// built-in ops (elementwise.cpp), fused kernels (fusion.cpp) and user
// ElementwiseKernels (user_kernels.cpp) take their coalesced axes and 32-bit
// fitness from the core's plan (src/core/iteration.hpp), and pass scalars, size
// grids and fill the strided kernels' Params words the same way (codegen.hpp
// documents the words).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "core/iteration.hpp"
#include "cuda/codegen.hpp"
#include "kiln/array.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {

/// Most operands (output included) of one fused elementwise problem.
inline constexpr int kMaxLayoutOperands = 16;

/// The problem after coalescing (the core's plan, src/core/iteration.hpp): shape and per-operand element
/// strides, output first for built-ins.
template <int MaxOperands>
using StridedLayout = detail::ElementwiseIteration<MaxOperands>;

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

/// The vector width of a strided problem whose every array operand is dense along the innermost axis: the widest
/// 16-byte vector that divides that axis and every outer stride, to which every pointer is aligned, and of which
/// the axis holds two or more; 1 when an operand is not dense there.
template <class L>
int strided_vector_width(const L& layout, const Array* const* arrays, void* const* pointers, int operands) {
  const int nd = layout.ndim;
  if (nd < 2) return 1;
  for (int k = 0; k < operands; ++k)
    if (layout.strides[k][nd - 1] != 1) return 1;
  int vec = aligned_vector_width(arrays, pointers, operands);
  for (; vec > 1; vec /= 2) {
    bool divides = layout.shape[nd - 1] % vec == 0 && layout.shape[nd - 1] >= 2 * vec;
    for (int k = 0; k < operands && divides; ++k)
      for (int d = 0; d < nd - 1 && divides; ++d) divides = layout.shape[d] == 1 || layout.strides[k][d] % vec == 0;
    if (divides) break;
  }
  return vec;
}

/// Params words of a strided kernel with 32-bit indices: size[ndim], magic[ndim], shift[ndim] (division by
/// invariant integers), then stride[operand][ndim]. Returns the number of words.
template <int M>
int strided_words32(const detail::StridedAxes<M>& layout, uint32_t* words) {
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
int strided_words64(const detail::StridedAxes<M>& layout, uint64_t* words) {
  const int nd = layout.ndim;
  for (int d = 0; d < nd; ++d) words[d] = static_cast<uint64_t>(layout.shape[d]);
  for (int k = 0; k < layout.operands; ++k)
    for (int d = 0; d < nd; ++d) words[nd + k * nd + d] = static_cast<uint64_t>(layout.strides[k][d]);
  return nd + layout.operands * nd;
}

/// The Params words for `layout`: fills `words32` or `words64` (room for 3*kMaxRank + M*kMaxRank
/// words) and returns a pointer to the one used.
template <int M>
void* strided_params(const detail::StridedAxes<M>& layout, bool index64, uint32_t* words32, uint64_t* words64) {
  if (index64) {
    strided_words64(layout, words64);
    return words64;
  }
  strided_words32(layout, words32);
  return words32;
}

/// How a tiled elementwise kernel (codegen.hpp's tiled layout) maps a plan: axis a is the output's innermost
/// axis (unit stride), axis b one along which a transposed input has unit stride; `tiled` has bit k set for each
/// array operand k (output 0) read through the shared-memory tile. tiled == 0: no tile helps.
struct TileChoice {
  int axis_a = -1, axis_b = -1;
  int tiled = 0;
};

/// Smallest extent of both tile axes: below it most of a 32 x 32 tile's threads would idle.
inline constexpr int64_t kMinTileExtent = 16;

/// The tiled mapping of `layout` (array operands, output first): worth it when the output steps by 1 along its
/// innermost axis and some input steps by 1 along another axis of at least kMinTileExtent elements, so the
/// strided kernel would read that input (or write the output) with a large stride.
template <int M>
TileChoice choose_tiles(const detail::StridedAxes<M>& layout) {
  TileChoice c;
  const int nd = layout.ndim, a = nd - 1;
  if (nd < 2 || layout.strides[0][a] != 1 || layout.shape[a] < kMinTileExtent) return c;
  const auto mag = [](int64_t v) { return v < 0 ? -v : v; };
  for (int k = 1; k < layout.operands; ++k) {
    if (mag(layout.strides[k][a]) <= 1) continue;  // broadcast or unit stride along a: read directly
    if (c.axis_b < 0) {
      for (int d = 0; d < a; ++d)
        if (mag(layout.strides[k][d]) == 1 && layout.shape[d] >= kMinTileExtent) c.axis_b = d;
      if (c.axis_b < 0) continue;
    }
    if (mag(layout.strides[k][c.axis_b]) == 1) c.tiled |= 1 << k;
  }
  if (c.tiled != 0) c.axis_a = a;
  return c;
}

/// Params words of a tiled kernel with at most M array operands and rank kMaxRank.
template <int M>
inline constexpr int kTiledWords = 5 + 2 * M + (kMaxRank - 2) * (1 + M);

/// Fills the tiled kernel's Params words (codegen.hpp) for `layout` and `c` into `words` (kTiledWords<M> of them,
/// 32- or 64-bit) and returns the number of tiles.
template <int M, class W>
int64_t tiled_words(const detail::StridedAxes<M>& layout, const TileChoice& c, W* words) {
  const int ops = layout.operands, nd = layout.ndim, batch = nd - 2;
  const int64_t size_a = layout.shape[c.axis_a], size_b = layout.shape[c.axis_b];
  const int64_t tiles_a = ceil_div(size_a, 32), tiles_b = ceil_div(size_b, 32);
  int64_t tiles = tiles_a * tiles_b;
  words[0] = static_cast<W>(size_a);
  words[1] = static_cast<W>(size_b);
  words[2] = static_cast<W>(tiles_a);
  words[3] = static_cast<W>(tiles_b);
  for (int k = 0; k < ops; ++k) {
    words[5 + k] = static_cast<W>(layout.strides[k][c.axis_a]);
    words[5 + ops + k] = static_cast<W>(layout.strides[k][c.axis_b]);
  }
  int i = 0;  // batch axes: every axis but a and b, in the plan's (C) order
  for (int d = 0; d < nd; ++d) {
    if (d == c.axis_a || d == c.axis_b) continue;
    words[5 + 2 * ops + i] = static_cast<W>(layout.shape[d]);
    for (int k = 0; k < ops; ++k) words[5 + 2 * ops + batch + k * batch + i] = static_cast<W>(layout.strides[k][d]);
    tiles *= layout.shape[d];
    ++i;
  }
  words[4] = static_cast<W>(tiles);
  return tiles;
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
/// runs one iteration). Memory-bound kernels stream better this way than with one wave of resident blocks: no
/// thread waits on a loop-carried index, and more loads are in flight (bench/bench_fusion_variants.cpp).
unsigned one_pass_grid(int64_t work_items, int per_thread);

}  // namespace kiln::cuda_impl
