// The core's side of autograd: what an Array carries (AutogradMeta), the graph's node, grad mode, and the
// one recording path through which each differentiable op attaches its backward to its result. The engine
// that links nodes to their inputs and runs backward lives in src/autograd (a layer above core) and defines
// `autograd_hook()`; the core never includes it.
//
// Recording: a public op that is a primitive of the graph (elementwise ops, reductions, scans, views,
// copies and casts, device moves, matmul, concatenate, take, scatter_add, custom functions) opens a
// GradRecorder over its array inputs. When grad mode is on and an input requires grad, the recorder turns
// grad mode off for the op's body (the ops it calls internally record nothing), and the op then records one
// Node on its result: its name, the arrays it saves (SavedArray: version-checked) and its backward, a
// function from the result's gradient to one gradient per input, written next to the op's forward (or, for
// the table-driven ops, in derivatives.cpp from the derivative columns). The engine never sees which op it
// was: a new primitive touches neither the hook nor src/autograd. Composite ops (dot, stack, moveaxis, ...)
// record through their parts.
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
#include <utility>
#include <vector>

#include "core/op_table.hpp"
#include "kiln/array.hpp"

namespace kiln {
class Operand;
}

namespace kiln::detail {

struct Node;
struct AutogradMeta;

/// Where a gradient goes: the node that made an input (every kiln node has one output; null: no gradient).
struct Edge {
  std::shared_ptr<Node> node;
};

/// An array a node keeps for backward: the data without its autograd state (no reference cycle through the
/// result's own node), and the storage version when it was saved, which get() checks.
class SavedArray {
 public:
  SavedArray() = default;
  explicit SavedArray(const Array& a);
  /// The array (undefined if an undefined one was saved); ValueError naming `node` when it was written in
  /// place after it was saved.
  const Array& get(const std::string& node) const;
  bool defined() const { return data_.defined(); }

 private:
  Array data_;
  uint64_t version_ = 0;
};

/// A step of the backward graph: one recorded op. `backward` maps the gradient of the op's result to one
/// gradient per input (an undefined Array where an input gets none); the engine reduces each to its input's
/// shape, dtype and device (`InputInfo`) and follows `next` (a null node: that input needs no gradient).
/// An op that another op's recording must recognise (a view of a view) derives from Node.
struct Node {
  struct InputInfo {
    Shape shape;
    DType dtype = DType::Float32;
    Device device;
  };
  /// (this node, the result's gradient) -> one gradient per input.
  using Backward = std::function<std::vector<Array>(const Node&, const Array&)>;
  Node() = default;
  Node(std::string name, Backward backward, std::vector<SavedArray> saved = {})
      : name(std::move(name)), backward(std::move(backward)), saved(std::move(saved)) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The gradients of the inputs (the engine checks `released` first).
  std::vector<Array> apply(const Array& grad) const { return backward(*this, grad); }
  /// A node of one input whose gradient fills only part of that input (a slice of its base): true when
  /// scatter_add can take `grad`. The engine then accumulates the gradients of such views into one buffer of
  /// the input's shape instead of a zero-filled input-sized gradient per view plus an add per pair.
  virtual bool scatters(const Array& /*grad*/) const { return false; }
  /// Adds the gradient into its part of `buffer` in place (a C-contiguous array of input 0's shape, dtype and
  /// device that the engine owns); false when `buffer` does not fit (the engine then calls apply).
  virtual bool scatter_add(const Array& /*grad*/, Array& /*buffer*/) const { return false; }
  /// Saved array `i`, version-checked.
  const Array& saved_array(size_t i) const { return saved.at(i).get(name); }
  /// Whether input `i` needs a gradient.
  bool needs(size_t i) const { return i < next.size() && next[i].node != nullptr; }
  /// Frees what the node saved for backward (after a backward without retain_graph); a node that saved
  /// nothing (a view, a cast, a leaf's accumulator) stays usable.
  void release() {
    if (saved.empty()) return;
    saved.clear();
    released = true;
  }

  /// Its name in messages and grad_fn_name() ("MatmulBackward").
  std::string name;
  Backward backward;
  std::vector<SavedArray> saved;
  /// True once release() freed saved arrays: a second backward through the node throws.
  bool released = false;
  std::vector<Edge> next;
  std::vector<InputInfo> inputs;
  uint64_t sequence_nr = 0;
  /// Where the forward op ran, recorded only in anomaly mode (the AnomalyScope labels then open, outermost
  /// first, joined by " > "; a module call opens one with the module's name).
  std::string anomaly_context;
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
  /// Why this leaf may no longer be used (kiln::retire), or "".
  std::string retired;
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

/// While alive, notes whether an op on this thread, run with grad mode off, had an input that requires grad
/// (autograd::checkpoint's forward: does fn read anything that backward must reach?). Probes nest.
class GradProbe {
 public:
  GradProbe();
  ~GradProbe();
  GradProbe(const GradProbe&) = delete;
  GradProbe& operator=(const GradProbe&) = delete;
  bool seen() const { return seen_; }
  void note() { seen_ = true; }

 private:
  GradProbe* previous_;
  bool seen_ = false;
};

/// Called by every in-place write into `dst` (see the top of this file); `op` names the op.
void note_inplace_write(const Array& dst, const char* op);

/// Throws DTypeError naming `op` when grad mode is on and an input requires grad: for the public ops that
/// have no gradient (sort, cumprod, random permutations of an input, ...), so a result never silently
/// drops its inputs' gradients.
void reject_grad(std::initializer_list<const Array*> inputs, const char* op, const char* fix);

/// The one recording path: attaches `node` (its name, saved arrays and backward set by the op) to `out`,
/// which then requires grad, with one edge per entry of `inputs` in order (null: an operand that gets no
/// gradient, as a scalar). Called by an op whose GradRecorder is active.
void record(Array& out, std::shared_ptr<Node> node, std::initializer_list<const Array*> inputs);
void record(Array& out, std::shared_ptr<Node> node, const std::vector<const Array*>& inputs);
void record(Array& out, std::shared_ptr<Node> node, const std::vector<Array>& inputs);

/// Throws DTypeError naming `op` for a result that has no gradient (a NotDifferentiable row whose result
/// is floating); `fix` says what to do instead.
[[noreturn]] void throw_not_differentiable(const std::string& op, const char* fix);

/// The engine's entry points (src/autograd): linking a node to its inputs' nodes and running backward.
class AutogradHook {
 public:
  virtual ~AutogradHook() = default;
  /// Gives `node` its edges and input infos from `inputs` (null: no gradient) and attaches it to `out`.
  virtual void record(const std::shared_ptr<Node>& node, const std::vector<const Array*>& inputs, Array& out) = 0;
  /// Runs backward from `root` (Array::backward).
  virtual void backward(const Array& root, const Array& gradient, bool retain_graph) = 0;
};

/// Defined by src/autograd.
AutogradHook& autograd_hook();

}  // namespace kiln::detail
