// The op table (internal): the columns of include/kiln/ops.def that core and every backend read, as
// constexpr data. OpCode numbers the rows; op_info(op) gives name, arity, typing rule, supported compute
// dtypes, accuracy, GPU vectorisation policy and derivative status. op_supports() is the one answer to
// "does this op have a kernel for this compute dtype", shared by the CPU and CUDA backends.
#pragma once

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

/// Compute dtypes an op has a kernel for (the front-end's typing never asks for others).
enum class OpDTypes : uint8_t { AnyType, NoBool, FloatOnly, IntOnly, BoolOnly, NoType };
/// Exact: correctly rounded (bit-exact against NumPy); Math: libm-like, a few ulps; Approx: float64 results
/// within 64 ulps (see ops.def).
enum class Accuracy : uint8_t { Exact, Math, Approx };
/// GPU contiguous kernels: vectorised loads (Vec: but not float64 Float-rule ops), integers only, never.
enum class GpuVector : uint8_t { Vec, VecInt, NoVec };
/// The derivative column: a formula (KILN_GRAD(...), evaluated by src/autograd) or NotDifferentiable.
enum class Derivative : uint8_t { Formula, NotDifferentiable };
#define KILN_DERIV_KILN_GRAD(...) ::kiln::detail::Derivative::Formula
#define KILN_DERIV_NotDifferentiable ::kiln::detail::Derivative::NotDifferentiable
/// Whether ops.hpp declares the op's function from the table (Fn), by hand (Own), or not at all (None).
enum class OpApi : uint8_t { Fn, Own, None };

struct OpInfo {
  const char* name;
  int arity;
  OpApi api;
  TypeRule rule;
  OpDTypes dtypes;
  Accuracy accuracy;
  GpuVector gpu_vector;
  bool cpu_simd;  ///< float32 rows go through a libmvec routine on the CPU
  Derivative derivative;
};

inline constexpr OpInfo kOpInfo[] = {
#define KILN_SIMD(f) true
#define KILN_NO_SIMD false
#define KILN_OP(Code, name, arity, api, rule, dtypes, accuracy, gpu_vector, cpu_simd, derivative, cpu, cuda) \
  {#name,         arity,                                                                                       \
   OpApi::api,    TypeRule::rule,                                                                              \
   OpDTypes::dtypes, Accuracy::accuracy,                                                                       \
   GpuVector::gpu_vector, cpu_simd,                                                                            \
   KILN_DERIV_##derivative},
#include "kiln/ops.def"
#undef KILN_SIMD
#undef KILN_NO_SIMD
};
static_assert(sizeof(kOpInfo) / sizeof(kOpInfo[0]) == static_cast<size_t>(OpCode::Count));

/// The table entry of `op`.
constexpr const OpInfo& op_info(OpCode op) { return kOpInfo[static_cast<int>(op)]; }

/// Whether `op` has a kernel computing in dtype `compute` -- on every backend (float16/bfloat16 compute
/// in float32 on both, so ask with the kernel's compute dtype).
constexpr bool op_supports(OpCode op, DType compute) {
  switch (op_info(op).dtypes) {
    case OpDTypes::AnyType: return true;
    case OpDTypes::NoBool: return compute != DType::Bool;
    case OpDTypes::FloatOnly: return is_floating(compute);
    case OpDTypes::IntOnly: return !is_floating(compute);
    case OpDTypes::BoolOnly: return compute == DType::Bool;
    case OpDTypes::NoType: return false;
  }
  return false;
}

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
#include "kiln/reductions.def"
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

inline constexpr ReduceInfo kReduceInfo[] = {
#define KILN_REDUCE_KERNEL(Code, name, api, result, empty, fuse, derivative, acc, ...)                          \
  {#name, ReduceKind::Kernel, ReduceApi::api, ReduceResult::result, ReduceEmpty::empty, ReduceFuse::fuse == ReduceFuse::Fused, \
   KILN_DERIV_##derivative, ReduceAcc::acc},
#define KILN_REDUCE_COMPOSED(Code, name, kind, api, result, empty, fuse, derivative)                          \
  {#name, ReduceKind::kind, ReduceApi::api, ReduceResult::result, ReduceEmpty::empty, ReduceFuse::fuse == ReduceFuse::Fused, \
   KILN_DERIV_##derivative, ReduceAcc::None},
#include "kiln/reductions.def"
};
static_assert(sizeof(kReduceInfo) / sizeof(kReduceInfo[0]) == static_cast<size_t>(kNumReduceOps));

/// The table entry of `op`.
constexpr const ReduceInfo& reduce_info(ReduceOp op) { return kReduceInfo[static_cast<int>(op)]; }
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
