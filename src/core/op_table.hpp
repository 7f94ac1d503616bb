// The op table (internal): every elementwise op once, with its arity, its
// typing rule and its name. Backends switch on OpCode; the core reads the
// typing rule to pick the output and compute dtypes. Adding an op touches this
// table and one kernel line per backend.
#pragma once

#include <cstdint>

#include "kiln/dtype.hpp"

namespace kiln::detail {

// Unary ops with a public function each (ops.hpp); Identity (casts, copies, fills) has none.
#define KILN_PUBLIC_UNARY_OPS(X)                                                                          \
  X(Negative, negative, Keep) X(Abs, abs, Keep) X(Sign, sign, Keep) X(Exp, exp, Float) X(Exp2, exp2, Float) \
  X(Log, log, Float) X(Log2, log2, Float) X(Log10, log10, Float) X(Log1p, log1p, Float)                  \
  X(Expm1, expm1, Float) X(Sqrt, sqrt, Float) X(Square, square, Keep) X(Sin, sin, Float)                 \
  X(Cos, cos, Float) X(Tan, tan, Float) X(Arcsin, arcsin, Float) X(Arccos, arccos, Float)                \
  X(Arctan, arctan, Float) X(Sinh, sinh, Float) X(Cosh, cosh, Float) X(Tanh, tanh, Float)                \
  X(Sigmoid, sigmoid, Float) X(Relu, relu, Keep) X(Floor, floor, Keep) X(Ceil, ceil, Keep)               \
  X(Round, round, Keep) X(Trunc, trunc, Keep) X(LogicalNot, logical_not, Logical)                        \
  X(IsNan, isnan, Predicate) X(IsInf, isinf, Predicate) X(IsFinite, isfinite, Predicate)                 \
  X(BitwiseNot, bitwise_not, Bitwise)
#define KILN_UNARY_OPS(X) KILN_PUBLIC_UNARY_OPS(X) X(Identity, identity, Keep)

#define KILN_BINARY_OPS(X)                                                                                     \
  X(Add, add, Arith) X(Subtract, subtract, Arith) X(Multiply, multiply, Arith) X(Divide, divide, TrueDivide) \
  X(FloorDivide, floor_divide, Arith) X(Remainder, remainder, Arith) X(Power, power, Arith)                 \
  X(Maximum, maximum, Arith) X(Minimum, minimum, Arith) X(Arctan2, arctan2, Float)                          \
  X(Equal, equal, Compare) X(NotEqual, not_equal, Compare) X(Less, less, Compare)                           \
  X(LessEqual, less_equal, Compare) X(Greater, greater, Compare) X(GreaterEqual, greater_equal, Compare)    \
  X(LogicalAnd, logical_and, Logical) X(LogicalOr, logical_or, Logical) X(LogicalXor, logical_xor, Logical) \
  X(BitwiseAnd, bitwise_and, Bitwise) X(BitwiseOr, bitwise_or, Bitwise) X(BitwiseXor, bitwise_xor, Bitwise)

#define KILN_TERNARY_OPS(X) X(Where, where, Select) X(Clip, clip, Arith)
#define KILN_NULLARY_OPS(X) X(Fill, fill, Keep) X(Arange, arange, Keep) X(Linspace, linspace, Keep)

enum class OpCode : uint8_t {
#define KILN_ENUM(e, n, r) e,
  KILN_UNARY_OPS(KILN_ENUM) KILN_BINARY_OPS(KILN_ENUM) KILN_TERNARY_OPS(KILN_ENUM) KILN_NULLARY_OPS(KILN_ENUM)
#undef KILN_ENUM
      Count
};

/// How an op's output and compute dtypes follow from its (promoted) input dtype.
enum class TypeRule : uint8_t {
  Keep,        ///< output = compute = promoted input
  Float,       ///< output = compute = float_result_type(promoted)
  Arith,       ///< output = compute = promoted (bool rules per op, as NumPy)
  TrueDivide,  ///< integers and bool -> float64, floats keep
  Compare,     ///< compute = promoted, output bool
  Logical,     ///< compute = output = bool
  Predicate,   ///< compute = input, output bool
  Bitwise,     ///< bool and integers only; output = promoted
  Select,      ///< where: condition as bool, values promoted
};

struct OpInfo {
  const char* name;
  int arity;
  TypeRule rule;
};

/// The table entry of `op`.
const OpInfo& op_info(OpCode op);

enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, ArgMax, ArgMin, All, Any };
const char* reduce_op_name(ReduceOp op);

enum class RandomDistribution : uint8_t { Uniform, Normal, RandInt };

}  // namespace kiln::detail
