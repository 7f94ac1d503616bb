// Reductions (internal): the axis plan and result dtypes of kiln's reductions, shared with
// fusion's final reduction and user ReductionKernels so all three check axes the same way.
#pragma once

#include <cstdint>

#include "core/op_table.hpp"
#include "kiln/array.hpp"

namespace kiln::detail {

/// The axes a reduction covers, checked and sorted, with the shapes around it.
struct Reduction {
  Shape axes;         ///< sorted, non-negative
  Shape keep_shape;   ///< input shape with the reduced axes set to 1
  Shape out_shape;    ///< input shape without the reduced axes
  int64_t count = 1;  ///< elements reduced into each output element
};

/// The axes of a rank-`ndim` input that `axes` names (every axis when axes.all()), normalised and
/// sorted. Throws ShapeError naming `op` for an axis out of bounds or listed twice; `shape`, when
/// known (not at fusion's trace time), is named in the message too.
Shape reduction_axes(const Axes& axes, int64_t ndim, const char* op, const Shape* shape = nullptr);
/// The plan of reducing an input of `shape` over `axes` (reduction_axes, then the shapes and count).
Reduction plan_reduction(const Shape& shape, const Axes& axes, const char* op);

/// sum/prod: bool and integers give int64 (NumPy gives uint64 for uint8; kiln has none), floats keep.
DType sum_dtype(DType t);
/// mean/var/std: bool and integers give float64, floats keep.
DType mean_dtype(DType t);
/// The value of `op` over zero elements (reductions.def's `empty` column); ValueError when it has none.
Scalar reduce_empty_value(ReduceOp op);
/// One backend reduction `op` of `a` over `axes` into a new array of `out_dtype` (internal: linalg::norm runs
/// ReduceOp::Norm through it). Over no axes (a 0-d array) it returns a converted copy; empty reductions give
/// the op's identity (sum, prod, all, any, norm only).
Array run_reduction(const Array& a, ReduceOp op, const Axes& axes, DType out_dtype, bool keepdims);
/// Throws ValueError naming `op` when `a` is undefined (default-constructed).
void require_defined(const Array& a, const char* op);

}  // namespace kiln::detail
