// The autograd engine: the nodes each recorded op attaches to its result (their backward evaluates the
// derivative column of the op tables), gradient accumulation into leaves, and backward().
#include <algorithm>
#include <atomic>
#include <string>
#include <unordered_map>
#include <vector>

#include "autograd/formulas.hpp"
#include "core/autograd.hpp"
#include "core/indexing.hpp"
#include "core/reduce.hpp"
#include "kiln/autograd.hpp"
#include "kiln/conv.hpp"
#include "kiln/indexing.hpp"
#include "kiln/ops.hpp"

namespace kiln::autograd {

using detail::AutogradMeta;
using detail::Edge;
using detail::Node;
using detail::OpCode;
using detail::ReduceOp;

namespace {

std::atomic<uint64_t> g_sequence{0};

/// An array kept for backward: the data without its autograd state (no reference cycle through the
/// result's own node), and the storage version when it was saved.
class Saved {
 public:
  Saved() = default;
  explicit Saved(const Array& a) : data_(a.detach()), version_(a.storage() ? a.storage()->version() : 0) {}
  const Array& get(const Node& node) const {
    if (!data_.defined())
      throw ValueError(node.name() +
                       ": its saved arrays were freed by an earlier backward; pass retain_graph=true "
                       "to the first backward() to run backward through the graph twice");
    if (data_.storage()->version() != version_)
      throw ValueError(node.name() + ": an array it saved for the backward pass (shape " + shape_str(data_.shape()) +
                       ", " + std::string(dtype_name(data_.dtype())) + ") was modified in place afterwards (version " +
                       std::to_string(data_.storage()->version()) + ", saved at " + std::to_string(version_) +
                       "); its gradient would be wrong. Modify a copy() instead, or do the in-place write before "
                       "using the array");
    return data_;
  }
  void reset() { data_ = Array(); }
  bool defined() const { return data_.defined(); }

 private:
  Array data_;
  uint64_t version_ = 0;
};

/// The gradient accumulator of a leaf.
struct AccumulateGrad : Node {
  explicit AccumulateGrad(Array v) : variable(std::move(v)) {}
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Array> apply(const Array& grad) override {
    AutogradMeta& meta = *variable.autograd_meta();
    Array g = grad;
    for (const auto& hook : meta.hooks)
      if (Array replaced = hook(g); replaced.defined()) g = replaced;
    if (!meta.grad.defined()) {
      // Own the gradient: it is accumulated into in place later, so it must alias nothing else.
      const bool owned = g.storage().use_count() <= 2 && (g.is_contiguous() || is_channels_last(g)) &&
                         g.offset() == 0 && g.nbytes() == static_cast<int64_t>(g.storage()->nbytes());
      // A copy in g's layout (one pass): a channels-last weight keeps a channels-last gradient.
      const bool channels_last = is_channels_last(g) && !g.is_contiguous();
      meta.grad = owned ? g.detach() : channels_last ? g.permute({0, 2, 3, 1}).copy().permute({0, 3, 1, 2}) : g.copy();
    } else {
      add(meta.grad, g, meta.grad);
    }
    for (const auto& hook : meta.post_accumulate_hooks) hook(variable);
    return {};
  }
  Array variable;
};

Edge edge_of(const Array& in) {
  if (!detail::requires_grad(in)) return {};
  AutogradMeta& meta = *in.autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn};
  std::shared_ptr<Node> acc = meta.accumulator.lock();
  if (!acc) {
    Array variable = in.detach();
    variable.set_autograd_meta(in.autograd_meta());
    acc = std::make_shared<AccumulateGrad>(std::move(variable));
    meta.accumulator = acc;
  }
  return {acc};
}

Node::InputInfo info_of(const Array& a) { return {a.shape(), a.dtype(), a.device()}; }

/// Adds input `a` (an edge, or none when it needs no gradient) to `node`.
void add_input(Node& node, const Array* a) {
  node.next.push_back(a ? edge_of(*a) : Edge{});
  node.inputs.push_back(a ? info_of(*a) : Node::InputInfo{});
}

void attach(Array& out, const std::shared_ptr<Node>& node) {
  node->sequence_nr = g_sequence.fetch_add(1, std::memory_order_relaxed);
  auto meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = node;
  node->result = meta;
  out.set_autograd_meta(std::move(meta));
}

/// Sums `g` over the axes that broadcasting added or stretched, back to `shape`.
Array sum_to(const Array& g, const Shape& shape, const std::string& who) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.ndim() - static_cast<int64_t>(shape.size());
  if (lead < 0)
    throw ValueError(who + ": internal error: gradient of shape " + shape_str(g.shape()) + " for input " +
                     shape_str(shape));
  Shape axes;
  for (int64_t d = 0; d < g.ndim(); ++d)
    if (d < lead || (shape[static_cast<size_t>(d - lead)] == 1 && g.shape(d) != 1))
      axes.push_back(d);
    else if (shape[static_cast<size_t>(d - lead)] != g.shape(d))
      throw ValueError(who + ": internal error: gradient of shape " + shape_str(g.shape()) + " for input " +
                       shape_str(shape));
  return sum(g, axes, true).reshape(shape);
}

/// A gradient in its input's shape, dtype and device.
Array fit(const Array& g, const Node::InputInfo& info, const std::string& who) {
  Array r = sum_to(g, info.shape, who);
  if (r.dtype() != info.dtype) r = r.astype(info.dtype);
  if (r.device() != info.device) r = r.to(info.device);
  return r;
}

// ---------------------------------------------------------------- op names
std::string camel_backward(const char* code) { return std::string(code) + "Backward"; }

const char* const kOpCodes[] = {
#define KILN_OP(Code, ...) #Code,
#include "kiln/ops.def"
};
const char* const kReduceCodes[] = {
#define KILN_REDUCTION(Code, ...) #Code,
#include "kiln/reductions.def"
};

// ---------------------------------------------------------------- formulas
// Each row's derivative column, expanded into one case: KILN_GRAD(da, db, dc) assigns the gradient of each
// input that needs one; NotDifferentiable leaves them undefined.
#define KILN_GRAD_1(d0) \
  if (need[0]) r[0] = (d0);
#define KILN_GRAD_2(d0, d1) \
  KILN_GRAD_1(d0)           \
  if (need[1]) r[1] = (d1);
#define KILN_GRAD_3(d0, d1, d2) \
  KILN_GRAD_2(d0, d1)           \
  if (need[2]) r[2] = (d2);
#define KILN_GRAD_PICK(_1, _2, _3, N, ...) N
#define KILN_GRAD(...) KILN_GRAD_PICK(__VA_ARGS__, KILN_GRAD_3, KILN_GRAD_2, KILN_GRAD_1, unused)(__VA_ARGS__) return r;
#define NotDifferentiable return r;

std::vector<Array> elementwise_formula(OpCode op, const Array& a, const Array& b, const Array& c, const Array& out,
                                       const Array& g, const bool* need) {
  std::vector<Array> r(3);
  (void)b;
  (void)c;
  (void)out;
  switch (op) {
#define KILN_OP(Code, name, arity, api, rule, dtypes, accuracy, gpu_vector, cpu_simd, derivative, ...) \
  case OpCode::Code: {                                                                                 \
    derivative                                                                                         \
  }
#include "kiln/ops.def"
    case OpCode::Count:
      break;
  }
  return r;
}

std::vector<Array> reduction_formula(ReduceOp op, const Array& a, const Array& out, const Array& g, const Shape& axes,
                                     double n, double ddof, int64_t axis, const bool* need) {
  std::vector<Array> r(1);
  (void)out;
  (void)axes;
  (void)n;
  (void)ddof;
  (void)axis;
  (void)a;
  switch (op) {
#define KILN_REDUCTION(Code, name, kind, api, result, empty, fuse, derivative) \
  case ReduceOp::Code: {                                                       \
    derivative                                                                 \
  }
#include "kiln/reductions.def"
  }
  return r;
}
#undef NotDifferentiable
#undef KILN_GRAD
#undef KILN_GRAD_PICK
#undef KILN_GRAD_1
#undef KILN_GRAD_2
#undef KILN_GRAD_3

/// Whether a derivative text names identifier `id` (so the node saves that array).
constexpr bool names(std::string_view text, std::string_view id) {
  auto ident = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
  };
  for (size_t p = text.find(id); p != std::string_view::npos; p = text.find(id, p + 1)) {
    const bool before = p == 0 || !ident(text[p - 1]);
    const bool after = p + id.size() >= text.size() || !ident(text[p + id.size()]);
    if (before && after) return true;
  }
  return false;
}

#define KILN_GRAD_TEXT_KILN_GRAD(...) #__VA_ARGS__
#define KILN_GRAD_TEXT_NotDifferentiable ""
#define KILN_GRAD_TEXT(derivative) KILN_GRAD_TEXT_##derivative
const std::string_view kOpDerivatives[] = {
#define KILN_OP(Code, name, arity, api, rule, dtypes, accuracy, gpu_vector, cpu_simd, derivative, ...) \
  KILN_GRAD_TEXT(derivative),
#include "kiln/ops.def"
};
const std::string_view kReduceDerivatives[] = {
#define KILN_REDUCTION(Code, name, kind, api, result, empty, fuse, derivative) KILN_GRAD_TEXT(derivative),
#include "kiln/reductions.def"
};

// ---------------------------------------------------------------- nodes
struct ElementwiseNode : Node {
  std::string name() const override { return camel_backward(kOpCodes[static_cast<size_t>(op)]); }
  std::vector<Array> apply(const Array& g) override {
    Array operands[3];
    for (int k = 0; k < arity; ++k) {
      const size_t i = static_cast<size_t>(k);
      if (saved[i].defined())
        operands[i] = saved[i].get(*this);
      else if (is_scalar[i])
        operands[i] =
            scalar_array(scalars[i], scalars[i].kind() == Scalar::Kind::Bool ? DType::Bool : out_dtype, device);
    }
    const Array result = saved_out.defined() ? saved_out.get(*this) : Array();
    bool need[3] = {false, false, false};
    for (size_t k = 0; k < next.size(); ++k) need[k] = next[k].node != nullptr;
    return elementwise_formula(op, operands[0], operands[1], operands[2], result, g, need);
  }
  void release() override {
    for (Saved& s : saved) s.reset();
    saved_out.reset();
    released = true;
  }
  OpCode op{};
  int arity = 0;
  Saved saved[3];
  bool is_scalar[3] = {false, false, false};
  Scalar scalars[3];
  Saved saved_out;
  DType out_dtype = DType::Float32;
  Device device;
};

struct ReductionNode : Node {
  std::string name() const override { return camel_backward(kReduceCodes[static_cast<size_t>(op)]); }
  std::vector<Array> apply(const Array& g) override {
    const Array a = saved_in.defined() ? saved_in.get(*this) : Array();
    Array out = saved_out.defined() ? saved_out.get(*this) : Array();
    Array grad = g;
    if (!keepdims) {
      grad = grad.reshape(keep_shape);
      if (out.defined()) out = out.reshape(keep_shape);
    }
    const bool need[1] = {true};
    std::vector<Array> r = reduction_formula(op, a, out, grad, axes, n, ddof, 0, need);
    if (r[0].defined() && !(r[0].shape() == inputs[0].shape)) r[0] = broadcast_to(r[0], inputs[0].shape);
    return r;
  }
  void release() override {
    saved_in.reset();
    saved_out.reset();
    released = true;
  }
  ReduceOp op{};
  Saved saved_in, saved_out;
  Shape axes, keep_shape;
  bool keepdims = false;
  double n = 1, ddof = 0;
};

struct ScanNode : Node {
  std::string name() const override { return camel_backward(kReduceCodes[static_cast<size_t>(op)]); }
  std::vector<Array> apply(const Array& g) override {
    const bool need[1] = {true};
    std::vector<Array> r = reduction_formula(op, Array(), Array(), g, {}, 1, 0, axis ? *axis : 0, need);
    if (!axis && r[0].defined()) r[0] = r[0].reshape(inputs[0].shape);
    return r;
  }
  ReduceOp op{};
  std::optional<int64_t> axis;
};

/// A view of `base` (the first array of a chain of views that is not itself a view: the chain collapses).
struct ViewNode : Node {
  std::string name() const override { return "ViewBackward"; }
  std::vector<Array> apply(const Array& g) override {
    // Broadcast (stride-0) axes of the view: the gradients of the aliases add up.
    Shape stretched;
    for (size_t d = 0; d < view_shape.size(); ++d)
      if (view_strides[d] == 0 && view_shape[d] > 1) stretched.push_back(static_cast<int64_t>(d));
    Array grad = stretched.empty() ? g : sum(g, stretched, true);
    Shape shape = grad.shape();
    int64_t lo = base_offset, hi = base_offset;
    for (size_t d = 0; d < base_shape.size(); ++d) {
      if (base_shape[d] == 0) return {zeros(base_shape, grad.dtype(), grad.device())};
      const int64_t reach = (base_shape[d] - 1) * base_strides[d];
      (reach < 0 ? lo : hi) += reach;
    }
    Array buffer = zeros({hi - lo + 1}, grad.dtype(), grad.device());
    if (grad.size() > 0) as_strided(buffer, shape, view_strides, view_offset - lo).assign(grad);
    return {as_strided(buffer, base_shape, base_strides, base_offset - lo)};
  }
  Shape base_shape, base_strides, view_shape, view_strides;
  int64_t base_offset = 0, view_offset = 0;
};

struct ConvertNode : Node {
  std::string name() const override { return what; }
  std::vector<Array> apply(const Array& g) override { return {g}; }  // fit() converts back
  std::string what;
};

struct MatmulNode : Node {
  std::string name() const override { return "MatmulBackward"; }
  std::vector<Array> apply(const Array& g) override {
    const DType t = g.dtype();
    const Array a = sa.get(*this).astype(t), b = sb.get(*this).astype(t);
    const Array a2 = a.ndim() == 1 ? a.reshape({1, a.shape(0)}) : a;
    const Array b2 = b.ndim() == 1 ? b.reshape({b.shape(0), 1}) : b;
    Array g2 = g;
    if (b.ndim() == 1) g2 = expand_dims(g2, -1);
    if (a.ndim() == 1) g2 = expand_dims(g2, -2);
    std::vector<Array> r(2);
    if (next[0].node) {
      r[0] = matmul(g2, swapaxes(b2, -1, -2));
      if (a.ndim() == 1) r[0] = squeeze(r[0], -2);
    }
    if (next[1].node) {
      r[1] = matmul(swapaxes(a2, -1, -2), g2);
      if (b.ndim() == 1) r[1] = squeeze(r[1], -1);
    }
    return r;
  }
  void release() override {
    sa.reset();
    sb.reset();
    released = true;
  }
  Saved sa, sb;
};

struct ConcatenateNode : Node {
  std::string name() const override { return "ConcatenateBackward"; }
  std::vector<Array> apply(const Array& g) override {
    std::vector<Array> r;
    int64_t position = 0;
    for (const InputInfo& info : inputs) {
      const int64_t extent = info.shape[static_cast<size_t>(axis)];
      r.push_back(g.slice(axis, position, position + extent));
      position += extent;
    }
    return r;
  }
  int64_t axis = 0;
};

struct TakeNode : Node {
  std::string name() const override { return "TakeBackward"; }
  std::vector<Array> apply(const Array& g) override {
    const DType acc = g.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
    Array grad = zeros(inputs[0].shape, acc, g.device());
    // A contiguous input: the forward's checked storage offsets, shifted, are the positions in `grad` (no
    // second bounds check, no synchronisation); any other layout: the positions recomputed for `grad`.
    const Array positions =
        offsets.defined() ? offsets.get(*this) - base : detail::take_offsets(grad, indices.get(*this), axis);
    detail::scatter_add_flat(grad, positions, g.astype(acc));
    return {grad};
  }
  void release() override {
    indices.reset();
    offsets.reset();
    released = true;
  }
  Saved indices, offsets;
  int64_t base = 0;
  std::optional<int64_t> axis;
};

struct ScatterAddNode : Node {
  std::string name() const override { return "ScatterAddBackward"; }
  std::vector<Array> apply(const Array& g) override {
    std::vector<Array> r(2);
    if (next[0].node) r[0] = g;
    if (next[1].node) r[1] = take_along_axis(g, indices.get(*this), axis);
    return r;
  }
  void release() override {
    indices.reset();
    released = true;
  }
  Saved indices;
  int64_t axis = 0;
};

/// A custom function's node (kiln::apply).
struct FunctionNode : Node {
  std::string name() const override { return label; }
  std::vector<Array> apply(const Array& g) override {
    std::vector<Array> arrays;
    arrays.reserve(saved.size());
    // An array saved undefined (an optional operand the forward did not have) comes back undefined; a released
    // node never gets here (backward checks `released` first).
    for (const Saved& s : saved) arrays.push_back(s.defined() ? s.get(*this) : Array());
    std::vector<bool> needs(next.size());
    for (size_t i = 0; i < next.size(); ++i) needs[i] = next[i].node != nullptr;
    std::vector<Array> r = backward(g, arrays, needs);
    if (r.size() != next.size())
      throw ValueError(label + ": backward returned " + std::to_string(r.size()) + " gradients for " +
                       std::to_string(next.size()) + " inputs; return one per input (an undefined Array for none)");
    return r;
  }
  void release() override {
    saved.clear();
    released = true;
  }
  std::string label;
  std::function<std::vector<Array>(const Array&, const std::vector<Array>&, const std::vector<bool>&)> backward;
  std::vector<Saved> saved;
};

[[noreturn]] void not_differentiable(const std::string& op, const char* fix) {
  throw DTypeError(op + ": has no gradient, and an input requires grad; " + fix +
                   " (or detach() the input, or run it under a NoGradGuard)");
}

bool is_injective(const Shape& shape, const Shape& strides) {
  std::vector<std::pair<int64_t, int64_t>> axes;  // (|stride|, extent) of the axes that move
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;
    if (shape[d] > 1) axes.emplace_back(strides[d] < 0 ? -strides[d] : strides[d], shape[d]);
  }
  std::sort(axes.begin(), axes.end());
  int64_t reach = 0;  // the largest offset the smaller axes reach
  for (const auto& [stride, extent] : axes) {
    if (stride <= reach) return false;
    reach += stride * (extent - 1);
  }
  return true;
}

// ---------------------------------------------------------------- the hook
class Engine final : public detail::AutogradHook {
 public:
  void record_elementwise(OpCode op, std::initializer_list<const Operand*> operands, Array& out) override {
    const detail::OpInfo& info = detail::op_info(op);
    if (info.derivative == detail::Derivative::NotDifferentiable) {
      if (is_floating(out.dtype())) not_differentiable(info.name, "it is not differentiable");
      return;  // bool and integer results carry no gradient
    }
    auto node = std::make_shared<ElementwiseNode>();
    node->op = op;
    node->arity = static_cast<int>(operands.size());
    node->out_dtype = out.dtype();
    node->device = out.device();
    const std::string_view text = kOpDerivatives[static_cast<size_t>(op)];
    static constexpr const char* kNames[] = {"a", "b", "c"};
    size_t k = 0;
    for (const Operand* o : operands) {
      if (o->is_array()) {
        add_input(*node, &o->array());
        if (names(text, kNames[k])) node->saved[k] = Saved(o->array());
      } else {
        add_input(*node, nullptr);
        node->is_scalar[k] = true;
        node->scalars[k] = o->scalar();
      }
      ++k;
    }
    if (names(text, "out")) node->saved_out = Saved(out);
    attach(out, node);
  }

  void record_reduction(ReduceOp op, const Array& in, const Axes& axes, bool keepdims, int64_t ddof,
                        Array& out) override {
    const detail::ReduceInfo& info = detail::reduce_info(op);
    if (info.derivative == detail::Derivative::NotDifferentiable) {
      if (is_floating(out.dtype())) not_differentiable(info.name, "it is not differentiable");
      return;
    }
    auto node = std::make_shared<ReductionNode>();
    node->op = op;
    const detail::Reduction r = detail::plan_reduction(in.shape(), axes, info.name);
    node->axes = r.axes;
    node->keep_shape = r.keep_shape;
    node->keepdims = keepdims;
    node->n = static_cast<double>(r.count);
    node->ddof = static_cast<double>(ddof);
    add_input(*node, &in);
    const std::string_view text = kReduceDerivatives[static_cast<size_t>(op)];
    if (names(text, "a")) node->saved_in = Saved(in);
    if (names(text, "out")) node->saved_out = Saved(out);
    attach(out, node);
  }

  void record_scan(ReduceOp op, const Array& in, std::optional<int64_t> axis, Array& out) override {
    const detail::ReduceInfo& info = detail::reduce_info(op);
    if (info.derivative == detail::Derivative::NotDifferentiable)
      not_differentiable(info.name, "compute it as exp(cumsum(log(x))) for positive x");
    auto node = std::make_shared<ScanNode>();
    node->op = op;
    if (axis) node->axis = normalize_axis(*axis, in.ndim(), info.name);
    add_input(*node, &in);
    attach(out, node);
  }

  void record_view(const Array& in, Array& out) override {
    auto node = std::make_shared<ViewNode>();
    const AutogradMeta& meta = *in.autograd_meta();
    if (const auto* parent = dynamic_cast<const ViewNode*>(meta.grad_fn.get())) {
      // A view of a view: record it against the first array of the chain.
      node->base_shape = parent->base_shape;
      node->base_strides = parent->base_strides;
      node->base_offset = parent->base_offset;
      node->next = parent->next;
      node->inputs = parent->inputs;
    } else {
      if (!is_injective(in.shape(), in.strides()))
        throw ValueError("view: the array requiring grad overlaps itself (shape " + shape_str(in.shape()) +
                         ", strides " + shape_str(in.strides()) +
                         "), so a view of it has no well-defined gradient; "
                         "take the view of a copy()");
      node->base_shape = in.shape();
      node->base_strides = in.strides();
      node->base_offset = in.offset();
      add_input(*node, &in);
    }
    node->view_shape = out.shape();
    node->view_strides = out.strides();
    node->view_offset = out.offset();
    Shape shape = out.shape();
    for (size_t d = 0; d < shape.size(); ++d)
      if (out.strides()[d] == 0) shape[d] = std::min<int64_t>(shape[d], 1);
    if (!is_injective(shape, out.strides()))
      throw ValueError("as_strided: a view whose elements overlap (shape " + shape_str(out.shape()) + ", strides " +
                       shape_str(out.strides()) +
                       ") of an array that requires grad has no gradient; use "
                       "broadcast_to for repeated elements, or a copy");
    attach(out, node);
  }

  void record_convert(const Array& in, Array& out, const char* op) override {
    auto node = std::make_shared<ConvertNode>();
    node->what = std::string(op == std::string("to")       ? "To"
                             : op == std::string("astype") ? "Astype"
                             : op == std::string("copy")   ? "Copy"
                                                           : "PinMemory") +
                 "Backward";
    add_input(*node, &in);
    attach(out, node);
  }

  void record_matmul(const Array& a, const Array& b, Array& out) override {
    auto node = std::make_shared<MatmulNode>();
    add_input(*node, &a);
    add_input(*node, &b);
    node->sa = Saved(a);
    node->sb = Saved(b);
    attach(out, node);
  }

  void record_concatenate(const std::vector<Array>& inputs, int64_t axis, Array& out) override {
    auto node = std::make_shared<ConcatenateNode>();
    node->axis = axis;
    for (const Array& a : inputs) add_input(*node, &a);
    attach(out, node);
  }

  void record_take(const Array& a, const Array& indices, std::optional<int64_t> axis, const Array& offsets,
                   Array& out) override {
    auto node = std::make_shared<TakeNode>();
    add_input(*node, &a);
    if (a.is_contiguous()) {
      node->offsets = Saved(offsets);
      node->base = a.offset();
    } else {
      node->indices = Saved(indices);
      node->axis = axis;
    }
    attach(out, node);
  }

  void record_scatter_add(const Array& a, int64_t axis, const Array& indices, const Array& src, Array& out) override {
    auto node = std::make_shared<ScatterAddNode>();
    add_input(*node, &a);
    add_input(*node, &src);
    node->indices = Saved(indices);
    node->axis = axis;
    attach(out, node);
  }

  void record_function(const AutogradFunction& f, const std::vector<Array>& inputs, const std::vector<Array>& saved,
                       Array& out) override {
    auto node = std::make_shared<FunctionNode>();
    for (const Array& a : inputs) add_input(*node, &a);
    node->label = f.name;
    node->backward = f.backward;
    for (const Array& a : saved) node->saved.emplace_back(a);
    attach(out, node);
  }

  void backward(const Array& root, const Array& gradient, bool retain_graph) override;
};

// Callbacks queued during the backward running on this thread (queue_callback); a backward started inside a
// hook gets its own list.
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

class CallbackScope {
 public:
  CallbackScope() : previous_(t_callbacks) { t_callbacks = &list_; }
  ~CallbackScope() { t_callbacks = previous_; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
  /// Runs the queued callbacks in order (one may queue another, which runs too).
  void run() {
    for (size_t i = 0; i < list_.size(); ++i) {
      auto f = std::move(list_[i]);
      f();
    }
    list_.clear();
  }

 private:
  std::vector<std::function<void()>>* previous_;
  std::vector<std::function<void()>> list_;
};

void Engine::backward(const Array& root, const Array& gradient, bool retain_graph) {
  if (!detail::requires_grad(root))
    throw ValueError(
        "backward: the array does not require grad: no array it was computed from was marked with "
        "set_requires_grad(), or it was computed under a NoGradGuard");
  Array seed;
  if (!gradient.defined()) {
    if (root.size() != 1)
      throw ValueError("backward: the array has shape " + shape_str(root.shape()) +
                       "; only a size-1 array gets the "
                       "implicit gradient 1: reduce it first (sum, mean) or pass gradient= of the same shape");
    seed = ones_like(root);
  } else {
    if (!(gradient.shape() == root.shape()))
      throw ShapeError("backward: gradient has shape " + shape_str(gradient.shape()) + " but the array has shape " +
                       shape_str(root.shape()) + "; pass a gradient of the array's shape");
    if (gradient.device() != root.device())
      throw DeviceError("backward: gradient is on " + gradient.device().str() + " but the array is on " +
                        root.device().str() + "; move it with .to(" + root.device().str() + ")");
    seed = gradient.detach().astype(root.dtype());
  }
  NoGradGuard no_grad;  // formulas run unrecorded (no gradients of gradients)
  CallbackScope callbacks;
  const Edge start = edge_of(root);

  // Dependencies: how many edges reach each node from the root.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{start.node.get()};
  deps[start.node.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      auto [it, fresh] = deps.try_emplace(e.node.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(e.node.get());
    }
  }
  std::unordered_map<Node*, Array> buffers;
  buffers[start.node.get()] = seed;
  std::vector<std::shared_ptr<Node>> ready{start.node};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Array g;
    if (auto it = buffers.find(node.get()); it != buffers.end()) {
      g = std::move(it->second);
      buffers.erase(it);
    }
    std::vector<Array> grads;
    if (g.defined()) {
      if (node->released)
        throw ValueError(node->name() +
                         ": backward through the graph a second time, after its saved arrays were "
                         "freed; pass retain_graph=true to the first backward()");
      for (const auto& hook : node->pre_hooks)
        if (Array replaced = hook(g); replaced.defined()) g = replaced;
      if (auto meta = node->result.lock(); meta && meta->retains_grad)
        meta->grad = meta->grad.defined() ? add(meta->grad, g) : g.copy();
      grads = node->apply(g);
      if (!retain_graph) node->release();
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const std::shared_ptr<Node>& child = node->next[i].node;
      if (!child) continue;
      if (i < grads.size() && grads[i].defined()) {
        Array gi = fit(grads[i], node->inputs[i], node->name());
        auto [it, fresh] = buffers.try_emplace(child.get(), gi);
        if (!fresh) it->second = add(it->second, gi);
      }
      if (--deps[child.get()] == 0) ready.push_back(child);
    }
  }
  callbacks.run();
}

}  // namespace

}  // namespace kiln::autograd

namespace kiln {
void queue_callback(std::function<void()> callback) {
  if (!autograd::t_callbacks)
    throw ValueError("queue_callback: no backward() is running on this thread; call it from a hook during backward");
  autograd::t_callbacks->push_back(std::move(callback));
}
}  // namespace kiln

namespace kiln::detail {
AutogradHook& autograd_hook() {
  static autograd::Engine engine;
  return engine;
}
}  // namespace kiln::detail
