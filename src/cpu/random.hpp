// CPU random kernels (internal): fill an array from kiln's Philox stream.
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {

/// Fills call.out (C-contiguous, host memory) with the values the stream of include/kiln/random.hpp
/// defines for (call.seed, call.offset). Parallel over Philox blocks (OpenMP) above a threshold; each
/// block is computed from its index alone, so the result does not depend on the thread count.
void cpu_random(const detail::RandomCall& call);

}  // namespace kiln::cpu_impl
