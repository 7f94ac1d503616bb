// Multi-tensor apply (internal): one traced elementwise graph (core/fusion.hpp)
// applied to a list of groups, as ATen's MultiTensorApply runs an optimizer over
// every parameter in a few launches. Group i holds the graph's array arguments
// for tensor i and its outputs, written in place. The core (multi_tensor.cpp)
// checks the arguments, computes the scalar slots once for all groups and hands
// the backend only "dense" groups: every array of the group's size laid out the
// same way in memory with no gaps (C-contiguous, or channels-last, or any dense
// permutation), so element j of the group is element j of each array's memory;
// an argument may instead hold one element, broadcast to the group (a device-side
// step size). A group that is not dense runs through fusion_run on its own.
// The entry point, detail::fusion_run_each, is declared in kiln/fuse.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/fusion.hpp"
#include "kiln/array.hpp"
#include "kiln/fuse.hpp"

namespace kiln::detail {

/// One tensor of a multi-tensor call.
struct MultiTensorGroup {
  /// Per graph argument: the array (`size` elements, or one element broadcast to them), or nullptr (a scalar or
  /// an unused argument).
  std::vector<const Array*> arrays;
  /// Per graph output: the array written in place (`size` elements, laid out as the group's full-size inputs).
  /// It may be the very array of an input (read and written element by element), nothing else overlaps.
  std::vector<Array> outs;
  int64_t size = 0;
};

/// A multi-tensor call as a backend executes it: `graph` (elementwise only, no reductions) over every group.
/// Every array lives on one device; every group's arrays have the dtypes `graph` was traced with.
struct MultiTensorCall {
  const FusionGraph* graph = nullptr;
  /// Per graph slot: its value, already rounded to the slot's compute dtype (as FusionCall::slot_values).
  std::vector<Scalar> slot_values;
  /// Per graph argument: the scalar value of a scalar argument (the op-by-op path recomputes weak values).
  std::vector<Scalar> scalars;
  std::vector<MultiTensorGroup> groups;
};

/// The values of the graph's scalar slots for these arguments (weak values computed on the host, range-checked
/// and rounded as the unfused ops round their scalar operands).
std::vector<Scalar> fusion_slot_values(const FusionGraph& graph, const std::vector<FusionArgument>& args);

/// `a` covers its elements' memory with no gap or overlap (some permutation of its axes is C-contiguous).
bool is_dense(const Array& a);

}  // namespace kiln::detail
