// The iteration plan (internal): how an op walks its operands' memory, computed
// once in core (as ATen's TensorIterator does) and handed to every backend, so
// broadcasting, axis coalescing, the kept/reduced split of reductions and the
// rank limit are written once.
//
// - Elementwise: the operands (output first) are broadcast views of one shape;
//   size-1 axes are dropped and neighbouring axes merged (the shape's C order, so a
//   flat index keeps its C-order meaning) wherever every operand steps uniformly. A
//   contiguous problem becomes one axis of stride 1.
// - Reductions: the axes split into kept and reduced ones; size-1 axes dropped,
//   negative strides of the first operand flipped (the operands' bases move by
//   `offsets`), each side sorted by the first operand's |stride|, largest first,
//   and merged; ReductionOrder turns flipping and sorting off per side (argmax
//   keeps its reduced axes in logical order, fused reductions everything).
//
// Fixed-size arrays only: planning an op allocates nothing (small-op host overhead
// is a headline figure). Strides are in elements.
#pragma once

#include <utility>
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "kiln/array.hpp"
#include "kiln/error.hpp"
#include "kiln/shape.hpp"

namespace kiln::detail {

/// An op's name for an error message: a C string, or a callable that builds it (called only when throwing).
inline std::string op_label(const char* op) { return op; }
inline std::string op_label(const std::string& op) { return op; }
template <class F>
std::string op_label(const F& op) {
  return op();
}

/// Throws the ShapeError of an operand shape past kMaxRank, naming `op`, the shape and the fix.
[[noreturn]] void throw_rank_error(const std::string& op, const Shape& shape);

/// Throws ShapeError (naming `op`, see op_label) when `shape` has more than kMaxRank dimensions.
template <class Op>
inline void check_rank(const Shape& shape, const Op& op) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) [[unlikely]]
    throw_rank_error(op_label(op), shape);
}

/// Axes of an iteration after coalescing: their sizes and each operand's element strides.
template <int MaxOperands>
struct StridedAxes {
  static constexpr int kMaxOperands = MaxOperands;
  int ndim = 0;
  int operands = 0;
  int64_t shape[kMaxRank];
  int64_t strides[MaxOperands][kMaxRank];

  /// Product of the sizes.
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
  /// Largest element offset operand `k` reaches from its (flipped) base: sum of (size - 1) * |stride|.
  int64_t extent(int k) const {
    int64_t e = 0;
    for (int d = 0; d < ndim; ++d) e += (shape[d] - 1) * (strides[k][d] < 0 ? -strides[k][d] : strides[k][d]);
    return e;
  }
  /// Appends an axis (the caller keeps ndim < kMaxRank).
  void push(int64_t size, const int64_t* operand_strides) {
    shape[ndim] = size;
    for (int k = 0; k < operands; ++k) strides[k][ndim] = operand_strides[k];
    ++ndim;
  }
  /// Merges neighbouring axes (outer first) where every operand steps uniformly.
  void merge() {
    int merged = 0;
    for (int d = 0; d < ndim; ++d) {
      if (merged > 0) {
        bool uniform = true;
        for (int k = 0; k < operands && uniform; ++k) uniform = strides[k][merged - 1] == strides[k][d] * shape[d];
        if (uniform) {
          shape[merged - 1] *= shape[d];
          for (int k = 0; k < operands; ++k) strides[k][merged - 1] = strides[k][d];
          continue;
        }
      }
      shape[merged] = shape[d];
      for (int k = 0; k < operands; ++k) strides[k][merged] = strides[k][d];
      ++merged;
    }
    ndim = merged;
  }
};

/// An elementwise iteration: the coalesced axes (at least one) plus what every backend asks of them.
template <int MaxOperands>
struct ElementwiseIteration : StridedAxes<MaxOperands> {
  int64_t numel = 0;        ///< elements of the output
  bool contiguous = false;  ///< one axis over which every operand has stride 1 (or a single element)
  bool index32 = false;     ///< numel and every operand's offsets fit a signed 32-bit index
};

/// Plans `operands` arrays (`arrays[k]`, all of shape `shape`: broadcast views, output first) into `plan`:
/// C-order coalescing, then the contiguous and 32-bit flags. Throws ShapeError (check_rank) past kMaxRank.
template <int M, class Op>
void plan_elementwise(ElementwiseIteration<M>& plan, const Shape& shape, const Array* const* arrays, int operands,
                      const Op& op) {
  check_rank(shape, op);
  plan.operands = operands;
  plan.ndim = 0;
  plan.numel = 1;
  // Axes in the output's memory order (largest stride first; stable, so a C-ordered output keeps the logical
  // order): a channels-last or transposed output then coalesces with inputs of its layout into one run.
  size_t order[kMaxRank];
  for (size_t d = 0; d < shape.size(); ++d) order[d] = d;
  if (operands > 0)
    for (size_t i = 1; i < shape.size(); ++i)
      for (size_t j = i; j > 0 && arrays[0]->strides()[order[j]] > arrays[0]->strides()[order[j - 1]]; --j)
        std::swap(order[j], order[j - 1]);
  for (size_t o = 0; o < shape.size(); ++o) {
    const size_t d = order[o];
    plan.numel *= shape[d];
    if (shape[d] == 1) continue;
    const int nd = plan.ndim;
    if (nd > 0) {
      bool merge = true;
      for (int k = 0; k < operands && merge; ++k)
        merge = plan.strides[k][nd - 1] == arrays[k]->strides()[d] * shape[d];
      if (merge) {
        plan.shape[nd - 1] *= shape[d];
        for (int k = 0; k < operands; ++k) plan.strides[k][nd - 1] = arrays[k]->strides()[d];
        continue;
      }
    }
    plan.shape[nd] = shape[d];
    for (int k = 0; k < operands; ++k) plan.strides[k][nd] = arrays[k]->strides()[d];
    ++plan.ndim;
  }
  if (plan.ndim == 0) {
    plan.ndim = 1;
    plan.shape[0] = 1;
    for (int k = 0; k < operands; ++k) plan.strides[k][0] = 0;
  }
  bool contiguous = plan.ndim == 1 || plan.numel == 1;
  for (int k = 0; k < operands && contiguous; ++k) contiguous = plan.numel == 1 || plan.strides[k][0] == 1;
  plan.contiguous = contiguous;
  bool fits = plan.numel <= INT32_MAX;
  for (int k = 0; k < operands && fits && !contiguous; ++k) fits = plan.extent(k) <= INT32_MAX;
  plan.index32 = fits;
}

/// A reduction's iteration: kept and reduced axes over the operands (inputs first, then outputs, whose
/// strides are 0 on reduced axes), and how far flipping moved each operand's base.
template <int MaxOperands>
struct ReductionIteration {
  StridedAxes<MaxOperands> kept;     ///< may have no axis (a full reduction)
  StridedAxes<MaxOperands> reduced;  ///< at least one axis (size 1, strides 0, when nothing is reduced)
  int64_t offsets[MaxOperands] = {};  ///< elements to add to operand k's base
  int64_t num_out = 1;                ///< product of the kept sizes
  int64_t num_reduced = 1;            ///< product of the reduced sizes
};

/// How plan_reduction_axes orders the axes.
struct ReductionOrder {
  bool flip_kept = true;     ///< walk kept axes where operand 0's stride is negative forwards
  bool flip_reduced = true;  ///< the same for reduced axes (not for argmax/argmin: ties go to the first index)
  bool sort_kept = true;     ///< kept axes by operand 0's |stride|, largest first (else logical order)
  bool sort_reduced = true;  ///< the same for reduced axes
};

/// Plans a reduction over the axes of `shape` where `reduced[d]` into `plan`. `arrays[k]` has strides for every
/// axis of `shape` (outputs in keepdims form); operands k >= num_inputs are outputs (stride 0 on reduced axes).
/// Throws ShapeError (check_rank) past kMaxRank.
template <int M, class Op>
void plan_reduction_axes(ReductionIteration<M>& plan, const Shape& shape, const bool* reduced,
                         const Array* const* arrays, int operands, int num_inputs, ReductionOrder order,
                         const Op& op) {
  check_rank(shape, op);
  plan.kept.operands = plan.reduced.operands = operands;
  plan.kept.ndim = plan.reduced.ndim = 0;
  plan.num_out = plan.num_reduced = 1;
  for (int k = 0; k < operands; ++k) plan.offsets[k] = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t size = shape[d];
    (reduced[d] ? plan.num_reduced : plan.num_out) *= size;
    if (size == 1) continue;
    int64_t strides[M];
    for (int k = 0; k < operands; ++k) strides[k] = reduced[d] && k >= num_inputs ? 0 : arrays[k]->strides()[d];
    if (strides[0] < 0 && (reduced[d] ? order.flip_reduced : order.flip_kept)) {
      for (int k = 0; k < operands; ++k) {
        plan.offsets[k] += (size - 1) * strides[k];
        strides[k] = -strides[k];
      }
    }
    (reduced[d] ? plan.reduced : plan.kept).push(size, strides);
  }
  const auto by_stride = [](StridedAxes<M>& axes) {
    // Largest |stride| of operand 0 first (stable: ties keep their logical order); an insertion sort over
    // at most kMaxRank axes, permuting every operand's strides alongside.
    for (int i = 1; i < axes.ndim; ++i) {
      for (int j = i; j > 0; --j) {
        const int64_t a = axes.strides[0][j - 1], b = axes.strides[0][j];
        if ((a < 0 ? -a : a) >= (b < 0 ? -b : b)) break;
        std::swap(axes.shape[j - 1], axes.shape[j]);
        for (int k = 0; k < axes.operands; ++k) std::swap(axes.strides[k][j - 1], axes.strides[k][j]);
      }
    }
  };
  if (operands > 0 && order.sort_kept) by_stride(plan.kept);
  if (operands > 0 && order.sort_reduced) by_stride(plan.reduced);
  plan.kept.merge();
  plan.reduced.merge();
  if (plan.reduced.ndim == 0) {
    const int64_t zeros[M] = {};
    plan.reduced.push(1, zeros);
  }
}

}  // namespace kiln::detail
