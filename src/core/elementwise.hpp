// Elementwise front-end (internal): checks, broadcasting, NEP 50 promotion,
// then one backend call. Used by the op functions, copies, casts and fills.
#pragma once

#include <initializer_list>

#include "core/op_table.hpp"
#include "kiln/ops.hpp"

namespace kiln::detail {

/// Runs `op` over the operands (broadcast together) into a new array, or into `out` when given.
Array elementwise(OpCode op, std::initializer_list<const Operand*> operands, const Array* out = nullptr);
/// Writes src (broadcast to dst's shape, converted to dst's dtype with any cast) into dst; same device required.
void copy_into(const Array& src, const Array& dst, const char* op);
/// Sets every element of dst to v.
void fill_into(const Array& dst, const Scalar& v);

/// Output and compute dtypes of `op` for operands of the given (promoted) dtype.
struct OpTypes {
  DType compute;
  DType out;
};
OpTypes op_types(OpCode op, DType promoted);

/// One operand as typing sees it: an array of `dtype`, or a weak scalar of `kind` (its value aside).
struct TypingOperand {
  bool is_array = true;
  DType dtype = DType::Float32;
  Scalar::Kind kind = Scalar::Kind::Int;
};
/// NumPy 2 / NEP 50 output and compute dtypes of `op` over `count` operands (the rules of
/// elementwise(), shared with fusion's tracer); throws DTypeError for unsupported dtypes.
OpTypes resolve_op_types(OpCode op, const TypingOperand* operands, int count);
/// The range check of weak scalar operand number `operand` of `op`: ValueError when an integer scalar does
/// not fit an integer compute dtype (comparisons switch `types.compute` to int64 instead). where's
/// condition (operand 0) is only read as a bool, so it is never out of range.
void check_scalar_range(OpCode op, int operand, const Scalar& s, OpTypes& types);
/// Whether an integer scalar fits integer dtype `t` (always true for other kinds and dtypes).
bool scalar_fits(const Scalar& s, DType t);
/// A weak float scalar rounded to `compute`'s precision first, as NumPy converts it to the loop's dtype.
Scalar round_scalar(const Scalar& s, DType compute);

}  // namespace kiln::detail
