// Fused kernels (internal): CUDA source generated from a kiln::fuse graph
// (core/fusion.hpp) and the launcher behind CudaBackend::fused.
//
// Every fused kernel evaluates the graph's elementwise nodes as a sequence of
// statements, each the prelude's op_<name> in the node's compute type with its result
// converted to the node's storage dtype (so float16 intermediates round exactly where
// the unfused ops round them) — an `element()` function storing every output — wrapped
// in one of four loops:
// - contiguous: every array operand contiguous: 16-byte vector loads/stores with
//   several vectors in flight per thread, a grid-stride loop and 32-bit indices when
//   they fit (the built-in contiguous kernel's loop, for any number of inputs);
// - strided: broadcast or strided operands: per-operand offsets from the coalesced
//   shape (division by invariant integers with 32-bit indices);
// - broadcast: every output and some inputs dense in the iteration order (a channels-last
//   activation), the other inputs broadcast (a zero stride: per-channel scale and shift):
//   the dense ones in 16-byte vectors, the broadcast ones per element at the strided
//   layout's offsets (Params holds only their strides), one vector per thread and step;
// - reduce: the final reduction. `group` threads (1, 2, ..., 32, or the block) reduce
//   one (output, split) task: they walk its reduced elements computing element() from
//   each operand's kept and reduced offsets, then combine with warp shuffles (and shared
//   memory across warps). With group 1, adjacent threads take adjacent outputs (coalesced
//   for a reduction over an outer axis). A split reduction writes accumulators
//   (partials[o * splits + split]) that the built-in reduction then reduces;
// - multi-tensor: an elementwise graph over a list of tensors (Fused::each), each block
//   one chunk of one tensor, from a table of pointers and sizes passed by value (see
//   MultiTensorTable); an argument in `broadcast_mask` is one element read by every index;
// - rows: a staged graph (elementwise work after reductions over the same axes). One
//   group per row (kept index), no split: one pass over the row per reduction (each
//   reading the reductions before it as per-row values, the combined value broadcast
//   to the whole group), then one pass writing the full-shape outputs, and lane 0
//   writing the reduced-shape ones. When the row is one axis along which every operand
//   is dense (or, for inputs, constant), each lane takes `vector_width` adjacent
//   elements per step (one 16-byte load per dense input, as the contiguous kernels).
//
// Kernel arguments, in order: one pointer per output (out0, ...; the classic reduction
// has one), one per array argument the graph reads (in argument order), one value per
// scalar slot (FusionSlot::argument_dtype), then for contiguous `n`, for strided
// `Params, n` (elementwise_layout.hpp's words; operands: outputs then inputs), for
// reduce `Params`: kept size[kn], reduced size[rn], then per input kept stride[kn] and
// reduced stride[rn], then num_out, num_red, splits, chunk; for rows the same with the
// outputs' strides after the inputs' and without splits, chunk. A multi-tensor kernel
// takes the table first, then the slots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/fusion.hpp"
#include "core/multi_tensor.hpp"
#include "cuda/codegen.hpp"

namespace kiln::cuda_impl {

enum class FusionLayout : uint8_t { Contiguous, Strided, Broadcast, Reduce, Rows, MultiTensor };

/// What a fused kernel's source depends on besides its graph.
struct FusionKernelSpec {
  FusionLayout layout = FusionLayout::Contiguous;
  int vector_width = 1;  ///< contiguous, broadcast, rows: elements per vector load/store
  int ndim = 1;          ///< strided, broadcast: coalesced rank; reduce: unused
  int unroll = 1;        ///< strided: elements per thread and iteration (1 or 4)
  bool index64 = false;
  // reduce
  detail::ReduceOp op = detail::ReduceOp::Sum;
  DType out = DType::Float32;  ///< the reduction's output dtype
  DType acc = DType::Float32;  ///< accumulator (reduce_accumulator_dtype)
  int group = 1;               ///< threads per (output, split) task: 1..32 (power of two) or kBlockSize
  int kept_ndim = 0;
  int reduced_ndim = 1;
  bool to_partials = false;
  // elementwise and rows
  bool aliased = false;    ///< an output is an input's array (no __restrict__)
  uint32_t kept_mask = 0;  ///< rows: bit k set when output k has the reduced shape (written once per row)
  /// multi-tensor: bit k set when array argument k is one element per tensor; broadcast: when it is read per
  /// element at its strides' offset (not in vectors); rows with vectors: when input k is constant along the row
  uint32_t broadcast_mask = 0;

  bool operator==(const FusionKernelSpec&) const = default;
};

}  // namespace kiln::cuda_impl

// Hashes over every field (a field added without being named here does not compile).
KILN_HASH_EVERY_FIELD(kiln::cuda_impl::FusionKernelSpec, layout, vector_width, ndim, unroll, index64, op, out, acc,
                      group, kept_ndim, reduced_ndim, to_partials, aliased, kept_mask, broadcast_mask);

namespace kiln::cuda_impl {

/// A fused kernel's identity within its graph: the device and the whole spec.
using FusionKernelKey = detail::DeviceKernelKey<FusionKernelSpec>;
/// The memo of fused kernels a graph keeps for this backend (FusionGraph::kernels).
using FusionKernelMemo = detail::KernelMemo<FusionKernelKey>;
/// "kiln_fused_<name>_<graph hash>_<layout...>" (shows up in profilers).
std::string fusion_kernel_name(const detail::FusionGraph& graph, const FusionKernelSpec& spec);
/// The kernel (no prelude) in a namespace named after it; throws DTypeError for an op without a GPU definition.
std::string fusion_kernel_code(const detail::FusionGraph& graph, const FusionKernelSpec& spec);
/// Complete source: the prelude of device_functions.hpp and the kernel.
std::string fusion_source(const detail::FusionGraph& graph, const FusionKernelSpec& spec);
/// Throws ValueError when the graph's array arguments and outputs exceed a kernel's operands.
void check_operand_count(const detail::FusionGraph& graph);
/// Argument indices of the array arguments the graph reads, in kernel-parameter order.
std::vector<int> fusion_array_arguments(const detail::FusionGraph& graph);
/// The reduce op a graph's final reduction runs as (mean: sum into float64).
detail::ReduceOp fusion_reduce_op(detail::ReduceOp r);

/// Elements of one tensor that one block of a multi-tensor kernel updates (32 per thread).
inline constexpr int64_t kMultiTensorChunk = 8192;

/// The tensor list of a multi-tensor kernel, a kernel parameter passed by value (no copy to the device; CUDA
/// limits a kernel's parameters to 4 KB, the scalar slots included): per tensor one pointer per operand (outputs,
/// then array arguments), its size and its first block (a block finds its tensor by a binary search of these, so
/// one launch takes every chunk of its tensors: as many blocks as they need). The host fills it at these offsets
/// and the generated source declares the same struct from these numbers (and checks its size).
struct MultiTensorTable {
  int operands = 0;
  int tensors = 0;  ///< tensors one launch takes (at most 255)
  size_t pointers = 0, sizes = 0, first = 0;  ///< byte offsets of the fields
  size_t bytes = 0;
};
/// The table for `operands` arrays and `slots` scalar slots (ValueError when they leave no room for one).
MultiTensorTable multi_tensor_table(int operands, int slots);
/// Runs call (CudaBackend::multi_tensor): one kernel per graph (and per broadcast mask) over every tensor, in as
/// few launches as the table allows, on the device's current stream.
void cuda_multi_tensor(const detail::MultiTensorCall& call);

/// Runs call (CudaBackend::fused): one generated kernel (plus the built-in second pass of a split
/// reduction) on the outputs' device and current stream. False (nothing run) for a staged graph with rows
/// too few and long for one group each (the core then runs the ops one by one).
bool cuda_fused(const detail::FusionCall& call);

}  // namespace kiln::cuda_impl
