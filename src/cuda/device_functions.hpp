// The CUDA prelude of every generated kernel (internal): device_prelude(), C++ source that NVRTC compiles in
// front of the generated kernel, self-contained (no includes). Its fixed parts are files, embedded at build time:
// src/cuda/kernels/prelude.cuh (integer typedefs, float16/bfloat16 conversions, kd::cast, the helpers kd::ops of
// the op list's cuda column), src/cuda/kernels/prelude_complex.cuh (kd::c64/c128 and their functions) and
// src/cuda/kernels/prelude_reductions.cuh (the reduction operators kd::red_* and warp shuffles). Between the
// complex part and the reductions, device_op_functions() generates kd::op_<name> for every op from the `cuda`
// column of src/core/ops_internal.def.
#pragma once

#include <string>

#include "core/op_table.hpp"
#include "kernel_sources/prelude.cuh.hpp"
#include "kernel_sources/prelude_complex.cuh.hpp"
#include "kernel_sources/prelude_reductions.cuh.hpp"

namespace kiln::cuda_impl {

/// The `cuda` column of each row of src/core/ops_internal.def, indexed by OpCode.
inline constexpr const char* kCudaExpressions[] = {
#define KILN_OP_IMPL(Code, rule, dtypes, accuracy, gpu_vector, cpu_simd, domain, derivative, cpu, cuda) cuda,
#include "core/ops_internal.def"
};
static_assert(sizeof(kCudaExpressions) / sizeof(kCudaExpressions[0]) == static_cast<size_t>(detail::OpCode::Count));

/// kd::op_<name>: one device function per row of the op list with inputs, from its cuda column:
/// `template <class T> R op_name(T a, T b) { return (R)(expression); }` (R: bool for comparisons,
/// predicates and logical ops, kd::real_of<T> for abs (a complex T's part type); where's condition `a` is bool).
inline std::string device_op_functions() {
  std::string s = "namespace kd {\n";
  for (int i = 0; i < detail::kNumOps; ++i) {
    const auto op = static_cast<detail::OpCode>(i);
    const detail::OpInfo& info = detail::op_info(op);
    if (info.arity == 0) continue;
    const std::string result = detail::returns_bool(op) ? "bool" : detail::returns_real(op) ? "real_of<T>" : "T";
    s += "template <class T> __device__ __forceinline__ " + result + " op_" + info.name + "(";
    for (int k = 0; k < info.arity; ++k) {
      const bool condition = info.rule == detail::TypeRule::Select && k == 0;
      s += std::string(k ? ", " : "") + (condition ? "bool " : "T ") + static_cast<char>('a' + k);
    }
    s += ") { return (" + result + ")(" + kCudaExpressions[i] + "); }\n";
  }
  return s + "}  // namespace kd\n";
}

/// The prelude of every generated kernel: the fixed helpers, the op functions, the reductions.
inline const std::string& device_prelude() {
  static const std::string prelude = std::string(kernel_sources::prelude_cuh) +
                                     std::string(kernel_sources::prelude_complex_cuh) + device_op_functions() +
                                     std::string(kernel_sources::prelude_reductions_cuh);
  return prelude;
}

}  // namespace kiln::cuda_impl
