// CPU elementwise engine entry point (internal).
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {
/// Runs an elementwise call (ops, casts, copies, fills, arange/linspace) on the CPU.
void cpu_elementwise(const detail::ElementwiseCall& call);
}  // namespace kiln::cpu_impl
