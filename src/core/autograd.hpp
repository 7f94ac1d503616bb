// The core's side of autograd: what an Array carries (AutogradMeta), the graph's node type, grad mode,
// and the one hook through which the core reports each differentiable op it runs. The engine that
// builds nodes and runs backward lives in src/autograd (a layer above core) and defines
// `autograd_hook()`; the core never includes it.
//
// Recording: a public op that is a primitive of the graph (elementwise ops, reductions, scans, views,
// copies and casts, device moves, matmul, concatenate, take) opens a GradRecorder over its array
// inputs. When grad mode is on and an input requires grad, the recorder turns grad mode off for the
// op's body (the ops it calls internally record nothing) and the op reports its result to the hook,
// which attaches a node to it. Composite ops (dot, stack, moveaxis, ...) record through their parts.
//
// In-place writes (out=, assign, fill, +=, index_put, put, copy_from) call `note_inplace_write`: it
// throws when the destination requires grad while grad mode is on (in-place ops are not recorded), and
// bumps the storage's version, which saved arrays check when backward reads them.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/op_table.hpp"
#include "kiln/array.hpp"

namespace kiln {
class Operand;
struct AutogradFunction;
}

namespace kiln::detail {

struct Node;
struct AutogradMeta;

/// Where a gradient goes: the node that made an input (every kiln node has one output; null: no gradient).
struct Edge {
  std::shared_ptr<Node> node;
};

/// A step of the backward graph: one recorded op. `apply` maps the gradient of the op's result to one
/// gradient per input (an undefined Array where an input gets none); the engine reduces each to its
/// input's shape and dtype (`InputInfo`) and follows `next` (a null node: that input needs no gradient).
struct Node {
  struct InputInfo {
    Shape shape;
    DType dtype = DType::Float32;
    Device device;
  };
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  virtual std::vector<Array> apply(const Array& grad) = 0;
  /// Frees what the node saved for backward (after a backward without retain_graph).
  virtual void release() {}
  /// True once release() ran: a second backward through the node throws.
  bool released = false;
  std::vector<Edge> next;
  std::vector<InputInfo> inputs;
  uint64_t sequence_nr = 0;
  /// Hooks registered on the node's result (Array::register_hook on a non-leaf): each may replace the
  /// gradient (a defined return value) before apply sees it.
  std::vector<std::function<Array(const Array&)>> pre_hooks;
  /// The result's autograd state, for retain_grad().
  std::weak_ptr<AutogradMeta> result;
};

/// What an Array handle carries once it takes part in autograd (copies of the handle share it).
struct AutogradMeta {
  bool requires_grad = false;
  /// The node that made this array (null for a leaf).
  std::shared_ptr<Node> grad_fn;
  /// The accumulated gradient (leaves, and non-leaves that retain_grad()).
  Array grad;
  bool retains_grad = false;
  /// A leaf's gradient accumulator, shared by every node that reads the leaf while it lives.
  std::weak_ptr<Node> accumulator;
  /// A leaf's hooks: called with its gradient before accumulation (a defined return value replaces it),
  /// then, after accumulation, the post-accumulate hooks with the leaf.
  std::vector<std::function<Array(const Array&)>> hooks;
  std::vector<std::function<void(const Array&)>> post_accumulate_hooks;
};

/// Grad mode of this thread (on by default; NoGradGuard turns it off).
bool grad_mode();
void set_grad_mode(bool enabled);

/// True when `a` requires grad (a leaf marked so, or a result recorded from one).
inline bool requires_grad(const Array& a) { return a.autograd_meta() && a.autograd_meta()->requires_grad; }

/// Open around a primitive op's body (see the top of this file).
class GradRecorder {
 public:
  explicit GradRecorder(std::initializer_list<const Array*> inputs);
  explicit GradRecorder(const std::vector<Array>& inputs);
  /// The elementwise form: the array operands among `operands`.
  explicit GradRecorder(std::initializer_list<const Operand*> operands, int /*tag*/);
  ~GradRecorder();
  GradRecorder(const GradRecorder&) = delete;
  GradRecorder& operator=(const GradRecorder&) = delete;
  /// True when the op must report its result to autograd_hook().
  explicit operator bool() const { return active_; }

 private:
  void start();
  bool active_ = false;
};

/// Called by every in-place write into `dst` (see the top of this file); `op` names the op.
void note_inplace_write(const Array& dst, const char* op);

/// Throws DTypeError naming `op` when grad mode is on and an input requires grad: for the public ops that
/// have no gradient (sort, cumprod, random permutations of an input, ...), so a result never silently
/// drops its inputs' gradients.
void reject_grad(std::initializer_list<const Array*> inputs, const char* op, const char* fix);

/// The engine's entry points. Each `record_*` attaches a node to `out` (making it require grad); the
/// inputs are those that the matching GradRecorder saw.
class AutogradHook {
 public:
  virtual ~AutogradHook() = default;
  /// An op row of kiln/ops.def; `operands` in order, scalars included.
  virtual void record_elementwise(OpCode op, std::initializer_list<const Operand*> operands, Array& out) = 0;
  /// A reduction row (kernel or composed, not the scans) over `axes` of `in`, ddof for var/std.
  virtual void record_reduction(ReduceOp op, const Array& in, const Axes& axes, bool keepdims, int64_t ddof,
                                Array& out) = 0;
  /// cumsum/cumprod along `axis` (flattened when absent).
  virtual void record_scan(ReduceOp op, const Array& in, std::optional<int64_t> axis, Array& out) = 0;
  /// `out` views `in`'s storage (any shape/strides/offset).
  virtual void record_view(const Array& in, Array& out) = 0;
  /// `out` is `in` copied, converted to another dtype and/or moved to another device (same shape).
  virtual void record_convert(const Array& in, Array& out, const char* op) = 0;
  virtual void record_matmul(const Array& a, const Array& b, Array& out) = 0;
  virtual void record_concatenate(const std::vector<Array>& inputs, int64_t axis, Array& out) = 0;
  /// out = take(a, indices, axis) (flattened a when axis is absent); `offsets` are the storage offsets the
  /// forward read (take_offsets: already bounds-checked).
  virtual void record_take(const Array& a, const Array& indices, std::optional<int64_t> axis, const Array& offsets,
                           Array& out) = 0;
  /// out = scatter_add(a, axis, indices, src).
  virtual void record_scatter_add(const Array& a, int64_t axis, const Array& indices, const Array& src, Array& out) = 0;
  /// out = f.forward(inputs) of a custom function (kiln::apply), with the arrays its forward saved.
  virtual void record_function(const AutogradFunction& f, const std::vector<Array>& inputs,
                               const std::vector<Array>& saved, Array& out) = 0;
  /// Runs backward from `root` (Array::backward).
  virtual void backward(const Array& root, const Array& gradient, bool retain_graph) = 0;
};

/// Defined by src/autograd.
AutogradHook& autograd_hook();

}  // namespace kiln::detail
