// Fusion's expression graph (internal): what tracing a function given to
// kiln::fuse records, and what a backend turns into one kernel. Nodes are in
// topological order (an operand's id is always smaller than its user's).
//
// Every value is "strong" (an array value: dtype and rank known) or "weak" (a C++
// number: a scalar argument, a constant of the function, or an op on weak values only,
// typed as NumPy types Python scalars: bool, int64 or float64). Weak values are
// computed on the host at each call; a strong op that reads a weak value gets it as a
// kernel argument (a "scalar slot"), rounded to the op's compute dtype as the unfused op
// rounds its scalar operand (round_scalar), so fused and unfused results agree.
//
// A graph has one or more outputs. Its reductions may be followed by elementwise
// work ("staged" graphs: softmax, norms); a graph whose only reduction is its only
// output is the classic final-reduction form (`reduce`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/kernel_memo.hpp"
#include "core/op_table.hpp"
#include "kiln/array.hpp"

namespace kiln::detail {

enum class FusionNodeKind : uint8_t { Argument, Constant, Op, Cast, Reduce };

/// A reduction of a fused function.

struct FusionNode {
  FusionNodeKind kind = FusionNodeKind::Op;
  bool weak = false;          ///< a weak scalar (computed on the host)
  DType dtype = DType::Bool;  ///< storage dtype of the value (weak: bool, int64 or float64)
  int ndim = 0;               ///< rank (weak: 0)
  int num_inputs = 0;
  int inputs[3] = {-1, -1, -1};
  // Op
  OpCode op = OpCode::Identity;
  DType compute = DType::Bool;  ///< the op's compute dtype (as elementwise() picks it)
  int slots[3] = {-1, -1, -1};  ///< scalar slot of each weak operand of a strong op, else -1
  // Argument
  int argument = -1;
  // Constant
  Scalar value;
  // Reduce (input: inputs[0])
  ReduceOp reduction = ReduceOp::Sum;  ///< a Fused row of kiln/reductions.def (logsumexp is traced as its parts)
  Shape axes;                          ///< sorted, non-negative axes of the input (all of them for a full reduction)
  bool keepdims = false;
};

/// A weak value read by a strong op: node `source`, rounded to `compute` and passed as `argument_dtype`.
struct FusionSlot {
  int source = -1;
  int user = -1;  ///< an Op node, or a Cast node (the weak value converted as it is: no rounding, no range check)
  int operand = 0;
  DType compute = DType::Float32;
  DType argument_dtype = DType::Float32;  ///< the kernel parameter's dtype (scalar_argument_dtype)
};

/// Always owned by a shared_ptr (fusion.cpp makes them): a recorded step keeps the graphs it replays alive.
struct FusionGraph : std::enable_shared_from_this<FusionGraph> {
  std::string name;
  std::vector<FusionNode> nodes;
  std::vector<FusionSlot> slots;
  std::vector<int> outputs;     ///< node ids of the results, in the function's order
  int output = -1;              ///< outputs[0]
  int reduce = -1;              ///< the classic form: node id of the final reduction (the only output), else -1
  int elementwise = -1;         ///< classic and elementwise graphs: the reduction's input, or the (first) output
  std::vector<int> reductions;  ///< every live Reduce node, in order
  bool staged = false;          ///< reductions, not in the classic form (elementwise work follows one)
  bool complex = false;         ///< a node's value or compute dtype is complex (set when traced)
  int num_arguments = 0;
  std::vector<bool> argument_is_array;
  std::vector<bool> live;  ///< per node: the output depends on it (dead nodes are neither run nor generated)
  uint64_t hash = 0;       ///< of the structure and dtypes (not of constant values), for kernel keys

  /// Compiled kernels a backend made for this graph, keyed by its full kernel spec (device included).
  BackendKernels kernels;
};

/// One fused call as a backend executes it: the elementwise part of `graph` over `shape` (the
/// broadcast shape of the array arguments), then the final reduction if the graph has one; or a staged
/// graph's rows (see FusionCall::outs).
struct FusionCall {
  const FusionGraph* graph = nullptr;
  /// Per graph argument: the Array broadcast to `shape`, or nullptr (a scalar or unused argument).
  std::vector<const Array*> arrays;
  /// Per graph slot: its value, already rounded to the slot's compute dtype.
  std::vector<Scalar> slot_values;
  Shape shape;
  /// The results, one per graph output. Elementwise graph: shape `shape`, possibly an out= array that is
  /// the very view of an input (`aliased`). Classic reduction: `shape` with the reduced axes set to 1 (keepdims
  /// form; sum/prod/max/min/all/any dtype; mean: a float64 sum that the core divides). Staged graph: each a view
  /// broadcast to `shape`, with stride 0 along `axes` when the output has the reduced shape (`full[k]` false:
  /// written once per row); every reduction reduces `axes` of a value of shape `shape`.
  std::vector<Array> outs;
  std::vector<bool> full;
  Shape axes;  ///< staged: the reduced axes (sorted)
  bool aliased = false;
};

/// Sets what follows from a graph's nodes and outputs: `output`, `live`, `reductions`, `reduce`, `staged`,
/// `complex`, `elementwise` and `hash` (as tracing a function does; the step compiler's merged graphs too).
void finish_fusion_graph(FusionGraph& g);

/// Byte range [lo, hi) of memory that `a` touches (hi == lo for an empty array).
std::pair<uintptr_t, uintptr_t> byte_range(const Array& a);
/// `a` and `b` touch overlapping bytes of one storage.
bool overlaps(const Array& a, const Array& b);
/// `a` and `b` are the same view: data, shape, strides and dtype.
bool same_view(const Array& a, const Array& b);

}  // namespace kiln::detail
