// The op table (internal): the public op list include/kiln/ops.def joined with its internal columns
// (src/core/ops_internal.def), as constexpr data that core and every backend read. OpCode numbers the rows;
// op_info(op) gives name, arity, typing rule, supported compute dtypes, accuracy, GPU vectorisation policy,
// input domain and derivative status. op_supports() is the one answer to
// "does this op have a kernel for this compute dtype", shared by the CPU and CUDA backends.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "kiln/dtype.hpp"

namespace kiln::detail {

enum class OpCode : uint8_t {
#define KILN_OP(Code, ...) Code,
#include "kiln/ops.def"
  Count
};
inline constexpr int kNumOps = static_cast<int>(OpCode::Count);

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

/// Compute dtypes an op has a kernel for (the front-end's typing never asks for others). The real sets
/// (AnyType, NoBool, FloatOnly, IntOnly, BoolOnly) exclude complex dtypes; their *Complex variants add them
/// (the ops NumPy defines on complex numbers).
enum class OpDTypes : uint8_t {
  AnyType, NoBool, FloatOnly, IntOnly, BoolOnly, NoType, AnyComplex, NoBoolComplex, FloatComplex
};
/// Exact: correctly rounded (bit-exact against NumPy); Math: libm-like, a few ulps; Approx: float64 results
/// within 64 ulps (see ops.def).
enum class Accuracy : uint8_t { Exact, Math, Approx };
/// GPU contiguous kernels: vectorised loads (Vec: but not float64 Float-rule ops), integers only, never.
enum class GpuVector : uint8_t { Vec, VecInt, NoVec };
/// The derivative column: a formula (KILN_GRAD(...), evaluated by the op's backward) or NotDifferentiable.
enum class Derivative : uint8_t { Formula, NotDifferentiable };
#define KILN_DERIV_KILN_GRAD(...) ::kiln::detail::Derivative::Formula
#define KILN_DERIV_NotDifferentiable ::kiln::detail::Derivative::NotDifferentiable
/// Whether ops.hpp declares the op's function from the table (Fn), by hand (Own), or not at all (None).
enum class OpApi : uint8_t { Fn, Own, None };
/// Where an op's test inputs come from (the domain column of ops_internal.def): the golden generator's values
/// per operand (tests/golden/ops_golden.py) and the gradchecks' interval (tests/core/test_autograd.cpp).
enum class InputDomain : uint8_t {
  Any,            ///< every value (floats in a few units around zero)
  Positive,       ///< x > 0 (logs)
  NonNegative,    ///< x >= 0 (sqrt)
  AboveMinusOne,  ///< x > -1 (log1p)
  Unit,           ///< (-1, 1) (arcsin, arccos, tan)
  SmallInt,       ///< small magnitudes whose squares stay exact in every dtype
  Moderate,       ///< |x| of a few units, where exponentials stay finite in float16
  Activation,     ///< |x| up to 12 (activation functions' saturated tails)
  Halves,         ///< near multiples of 0.5 (exact ties for rounding)
  Logical,        ///< a few zeros and nonzeros (truth values)
  Compare,        ///< a small pool of values, so that equal pairs occur
  Divisor,        ///< any numerator, nonzero divisor
  IntDivisor,     ///< wide numerator, small nonzero divisor (floor_divide, remainder)
  Power,          ///< positive base, small exponent
  Select,         ///< a truth value, then any two values
  Clip,           ///< any value, a lower bound <= 0, an upper bound > 0
  None,           ///< no inputs (fills and sequences)
};

struct OpInfo {
  const char* name;
  int arity;
  OpApi api;
  TypeRule rule;
  OpDTypes dtypes;
  Accuracy accuracy;
  GpuVector gpu_vector;
  bool cpu_simd;  ///< float32 rows go through a libmvec routine on the CPU
  InputDomain domain;
  Derivative derivative;
};

namespace op_rows {
struct Internal {
  OpCode code;
  TypeRule rule;
  OpDTypes dtypes;
  Accuracy accuracy;
  GpuVector gpu_vector;
  bool cpu_simd;
  InputDomain domain;
  Derivative derivative;
};
inline constexpr Internal kInternal[] = {
#define KILN_SIMD(f) true
#define KILN_NO_SIMD false
#define KILN_OP_IMPL(Code, rule, dtypes, accuracy, gpu_vector, cpu_simd, domain, derivative, cpu, cuda)        \
  {OpCode::Code,          TypeRule::rule, OpDTypes::dtypes,       Accuracy::accuracy, GpuVector::gpu_vector, \
   cpu_simd,              InputDomain::domain, KILN_DERIV_##derivative},
#include "core/ops_internal.def"
#undef KILN_SIMD
#undef KILN_NO_SIMD
};
struct Public {
  const char* name;
  int arity;
  OpApi api;
};
inline constexpr Public kPublic[] = {
#define KILN_OP(Code, name, arity, api) {#name, arity, OpApi::api},
#include "kiln/ops.def"
};
/// ops_internal.def has the rows of kiln/ops.def, in the same order.
constexpr bool internal_rows_match() {
  if (std::size(kInternal) != static_cast<size_t>(OpCode::Count)) return false;
  for (size_t i = 0; i < std::size(kInternal); ++i)
    if (kInternal[i].code != static_cast<OpCode>(i)) return false;
  return true;
}
static_assert(internal_rows_match(),
              "src/core/ops_internal.def must have one row per row of include/kiln/ops.def, same Code, same order");
constexpr std::array<OpInfo, static_cast<size_t>(OpCode::Count)> join() {
  std::array<OpInfo, static_cast<size_t>(OpCode::Count)> rows{};
  for (size_t i = 0; i < rows.size(); ++i) {
    const Internal& r = kInternal[i];
    rows[i] = {kPublic[i].name, kPublic[i].arity, kPublic[i].api, r.rule,   r.dtypes,
               r.accuracy,      r.gpu_vector,     r.cpu_simd,     r.domain, r.derivative};
  }
  return rows;
}
}  // namespace op_rows

inline constexpr std::array<OpInfo, static_cast<size_t>(OpCode::Count)> kOpInfo = op_rows::join();

/// The table entry of `op`.
constexpr const OpInfo& op_info(OpCode op) { return kOpInfo[static_cast<size_t>(op)]; }

/// Whether `op` has a kernel computing in dtype `compute` -- on every backend (float16/bfloat16 compute
/// in float32 on both, so ask with the kernel's compute dtype).
constexpr bool op_supports(OpCode op, DType compute) {
  const OpDTypes dtypes = op_info(op).dtypes;
  if (is_complex(compute))
    return dtypes == OpDTypes::AnyComplex || dtypes == OpDTypes::NoBoolComplex || dtypes == OpDTypes::FloatComplex;
  switch (dtypes) {
    case OpDTypes::AnyType:
    case OpDTypes::AnyComplex: return true;
    case OpDTypes::NoBool:
    case OpDTypes::NoBoolComplex: return compute != DType::Bool;
    case OpDTypes::FloatOnly:
    case OpDTypes::FloatComplex: return is_floating(compute);
    case OpDTypes::IntOnly: return !is_floating(compute);
    case OpDTypes::BoolOnly: return compute == DType::Bool;
    case OpDTypes::NoType: return false;
  }
  return false;
}

/// True when the op's result on a complex compute dtype is the real dtype of its parts (abs).
constexpr bool returns_real(OpCode op) { return op == OpCode::Abs; }

/// True when the op's result is bool whatever its compute dtype (comparisons, predicates, logical ops).
constexpr bool returns_bool(OpCode op) {
  const TypeRule r = op_info(op).rule;
  return r == TypeRule::Compare || r == TypeRule::Predicate || r == TypeRule::Logical;
}

// ---------------------------------------------------------------- reductions (kiln/reductions.def)

/// Every reduction, kernel rows first: ReduceOp values below kNumReduceKernels have a backend kernel
/// (a ReduceCall runs them); the rest are composed by the core. Norm is sqrt(sum(x * x)) with the squares
/// summed in float64 (the 2-norm of linalg::norm, one pass with its square root in the epilogue).
enum class ReduceOp : uint8_t {
#define KILN_REDUCTION(Code, ...) Code,
#include "kiln/reductions.def"
};
inline constexpr int kNumReduceOps = 0
#define KILN_REDUCTION(...) +1
#include "kiln/reductions.def"
    ;
inline constexpr int kNumReduceKernels = 0
#define KILN_REDUCE_KERNEL(...) +1
#include "core/reductions_internal.def"
    ;

enum class ReduceKind : uint8_t { Kernel, Composed, Scan };
/// How the public function is declared (see reductions.def).
enum class ReduceApi : uint8_t { Axes, Own, None };
/// The result dtype from the input dtype.
enum class ReduceResult : uint8_t { Sum, Mean, Same, Index, Bool, Float };
/// The value of a reduction over zero elements (Throws: no identity).
enum class ReduceEmpty : uint8_t { Zero, One, NaN, NegInf, Throws };
enum class ReduceFuse : uint8_t { Fused, NotFused };
/// The accumulator of a kernel row (Composed rows: None).
enum class ReduceAcc : uint8_t { Arith, Native, Index, Truth, Float64, None };

struct ReduceInfo {
  const char* name;
  ReduceKind kind;
  ReduceApi api;
  ReduceResult result;
  ReduceEmpty empty;
  bool fused;  ///< kiln::fuse traces it
  Derivative derivative;
  ReduceAcc acc;
};

namespace reduce_rows {
struct Internal {
  ReduceOp code;
  ReduceKind kind;
  ReduceResult result;
  ReduceEmpty empty;
  bool fused;
  Derivative derivative;
  ReduceAcc acc;
};
inline constexpr Internal kInternal[] = {
#define KILN_REDUCE_KERNEL(Code, result, empty, fuse, derivative, acc, ...)                                     \
  {ReduceOp::Code,           ReduceKind::Kernel,      ReduceResult::result, ReduceEmpty::empty,                 \
   ReduceFuse::fuse == ReduceFuse::Fused, KILN_DERIV_##derivative, ReduceAcc::acc},
#define KILN_REDUCE_COMPOSED(Code, kind, result, empty, fuse, derivative)                                       \
  {ReduceOp::Code,           ReduceKind::kind,        ReduceResult::result, ReduceEmpty::empty,                 \
   ReduceFuse::fuse == ReduceFuse::Fused, KILN_DERIV_##derivative, ReduceAcc::None},
#include "core/reductions_internal.def"
};
struct Public {
  const char* name;
  ReduceApi api;
};
inline constexpr Public kPublic[] = {
#define KILN_REDUCTION(Code, name, api) {#name, ReduceApi::api},
#include "kiln/reductions.def"
};
/// reductions_internal.def has the rows of kiln/reductions.def, in the same order, kernel rows first.
constexpr bool internal_rows_match() {
  if (std::size(kInternal) != static_cast<size_t>(kNumReduceOps)) return false;
  for (size_t i = 0; i < std::size(kInternal); ++i)
    if (kInternal[i].code != static_cast<ReduceOp>(i) ||
        (kInternal[i].kind == ReduceKind::Kernel) != (static_cast<int>(i) < kNumReduceKernels))
      return false;
  return true;
}
static_assert(internal_rows_match(),
              "src/core/reductions_internal.def must have one row per row of include/kiln/reductions.def, same "
              "Code, same order, kernel rows first");
constexpr std::array<ReduceInfo, static_cast<size_t>(kNumReduceOps)> join() {
  std::array<ReduceInfo, static_cast<size_t>(kNumReduceOps)> rows{};
  for (size_t i = 0; i < rows.size(); ++i) {
    const Internal& r = kInternal[i];
    rows[i] = {kPublic[i].name, r.kind, kPublic[i].api, r.result, r.empty, r.fused, r.derivative, r.acc};
  }
  return rows;
}
}  // namespace reduce_rows

inline constexpr std::array<ReduceInfo, static_cast<size_t>(kNumReduceOps)> kReduceInfo = reduce_rows::join();

/// The table entry of `op`.
constexpr const ReduceInfo& reduce_info(ReduceOp op) { return kReduceInfo[static_cast<size_t>(op)]; }
constexpr const char* reduce_op_name(ReduceOp op) { return reduce_info(op).name; }
/// True for the rows with a backend kernel of their own.
constexpr bool is_reduce_kernel(ReduceOp op) { return static_cast<int>(op) < kNumReduceKernels; }
/// True for argmax/argmin (an index result, the reduced axes walked in logical order).
constexpr bool is_index_reduction(ReduceOp op) { return reduce_info(op).acc == ReduceAcc::Index; }
/// The result dtype of `op` over an input of dtype `in` (NumPy 2's rules; kiln has no uint64).
DType reduce_result_dtype(ReduceOp op, DType in);
/// The reduction named `name`, or nullopt.
std::optional<ReduceOp> reduce_op_by_name(const char* name);

enum class RandomDistribution : uint8_t { Uniform, Normal, RandInt };

}  // namespace kiln::detail
