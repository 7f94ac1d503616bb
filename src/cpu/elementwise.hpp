// CPU elementwise engine entry point (internal).
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {
/// A row kernel of the elementwise engine: ptrs[0] the output, ptrs[1..] the inputs, each stepping by steps[k]
/// elements of its kernel type (0: broadcast, 1: contiguous; contiguous float32 rows take libmvec's SIMD math).
using ElementwiseKernel = void (*)(char* const* ptrs, const int64_t* steps, int64_t n);
/// Runs an elementwise call (ops, casts, copies, fills, arange/linspace) on the CPU.
void cpu_elementwise(const detail::ElementwiseCall& call);
/// Whether the CPU has a kernel for `op` computing in `compute` (float16/bfloat16 compute in float32).
bool cpu_has_kernel(detail::OpCode op, DType compute);
/// The kernel of `op` computing in `compute` (float16/bfloat16: float32), or nullptr. Its inputs are of the
/// compute type (where's condition: bool), its output of the compute type (bool for comparisons, predicates and
/// logical ops); the fused executor (fused_plan.cpp) takes these, so fused and unfused ops share every kernel.
ElementwiseKernel cpu_kernel(detail::OpCode op, DType compute);
}  // namespace kiln::cpu_impl
