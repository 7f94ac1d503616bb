// CPU executor of kiln::fuse (internal): runs a FusionCall in one pass over its
// arrays, block by block, with the elementwise engine's kernels (see fused.cpp).
#pragma once

#include <cstdint>

#include "core/fusion.hpp"

namespace kiln::cpu_impl {

/// Runs `call` (CpuBackend::fused) on the calling thread and kiln's thread team: an elementwise graph, a final
/// reduction into call.outs[0] (keepdims form; mean: the float64 sum, divided by the core) or a staged graph's
/// rows. Returns false, having written nothing, when it declines the call (more than 16 arrays, an op or
/// reduction without a CPU kernel for its dtype): the core then runs the ops one by one, which throw the error.
bool cpu_fused(const detail::FusionCall& call);

/// Runs flat elements [begin, end) of `call`, an elementwise graph (no reductions), on the calling thread only
/// (no parallel_for inside), so a caller can spread many small calls, or parts of one, over threads itself.
/// Flat elements are numbered in the call's iteration order: the C order of call.shape when outs[0] is
/// C-contiguous (else outs[0]'s memory order); [0, shape_numel(call.shape)) covers the call. Disjoint ranges of
/// one call may run concurrently. Returns false, having written nothing, when the executor declines the call
/// (a graph with reductions, more than 16 arrays, an op without a CPU kernel for its dtype). Does not
/// synchronise anything: the arrays must be ready (CPU arrays always are).
bool cpu_fused_range(const detail::FusionCall& call, int64_t begin, int64_t end);

}  // namespace kiln::cpu_impl
