// Multi-tensor apply on the CPU (CpuBackend::multi_tensor).
#pragma once

#include "core/multi_tensor.hpp"

namespace kiln::cpu_impl {

/// Runs call.graph over every group of `call` (see core/multi_tensor.hpp), writing the outputs in place.
void cpu_multi_tensor(const detail::MultiTensorCall& call);

}  // namespace kiln::cpu_impl
