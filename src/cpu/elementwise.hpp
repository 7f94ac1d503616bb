// CPU elementwise engine entry point (internal).
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {
/// Runs an elementwise call (ops, casts, copies, fills, arange/linspace) on the CPU.
void cpu_elementwise(const detail::ElementwiseCall& call);
/// Whether the CPU has a kernel for `op` computing in `compute` (float16/bfloat16 compute in float32).
bool cpu_has_kernel(detail::OpCode op, DType compute);
}  // namespace kiln::cpu_impl
