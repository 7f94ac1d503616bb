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

}  // namespace kiln::detail
