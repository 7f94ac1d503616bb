// Multi-tensor apply on the CPU: each group runs through the core's op-by-op
// path of kiln::fuse (detail::fusion_run), whose elementwise kernels spread every
// op over the thread team. This is the one place that runs the groups, so a fused
// CPU executor (one pass per element range) plugs in here without touching its
// callers; the results are the unfused ops' bits either way.
#include "cpu/multi_tensor.hpp"

#include <vector>

namespace kiln::cpu_impl {

void cpu_multi_tensor(const detail::MultiTensorCall& call) {
  const detail::FusionGraph& g = *call.graph;
  std::vector<detail::FusionArgument> args(call.scalars.size());
  for (size_t a = 0; a < args.size(); ++a) args[a].scalar = call.scalars[a];
  for (const detail::MultiTensorGroup& group : call.groups) {
    for (size_t a = 0; a < args.size(); ++a) args[a].array = group.arrays[a];
    std::vector<Array> results = group.outs;
    detail::fusion_run(g, args, results.data(), results.size());
  }
}

}  // namespace kiln::cpu_impl
