// The op table (internal): the columns of include/kiln/ops.def that core and every backend read, as
// constexpr data. OpCode numbers the rows; op_info(op) gives name, arity, typing rule, supported compute
// dtypes, accuracy, GPU vectorisation policy and derivative status. op_supports() is the one answer to
// "does this op have a kernel for this compute dtype", shared by the CPU and CUDA backends.
#pragma once

#include <cstdint>

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
/// The derivative column: Pending until the autograd issue writes the formula; NotDifferentiable for
/// ops with bool/integer results.
enum class Derivative : uint8_t { Pending, NotDifferentiable };
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
   Derivative::derivative},
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

/// The backends' reduction ops. Norm is sqrt(sum(x * x)) with the squares summed in float64 (the
/// 2-norm of linalg::norm, one pass with its square root in the epilogue).
enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, ArgMax, ArgMin, All, Any, Norm };
inline constexpr int kNumReduceOps = static_cast<int>(ReduceOp::Norm) + 1;
const char* reduce_op_name(ReduceOp op);

enum class RandomDistribution : uint8_t { Uniform, Normal, RandInt };

}  // namespace kiln::detail
