// kiln::fuse, running a traced graph: through the device's backend when it can
// (Backend::fused: generated kernels on a GPU, one blocked pass on the CPU), else node
// by node with kiln's own ops (autograd recording; the rare degenerate cases: empty
// arrays, empty reductions; staged graphs whose shapes one pass cannot serve; calls a
// backend declines). Also the out= checks (shapes, dtypes, aliasing).
#include <algorithm>
#include <cassert>
#include <string>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "core/elementwise.hpp"
#include "core/fusion.hpp"
#include "core/multi_tensor.hpp"
#include "core/reduce.hpp"
#include "kiln/fuse.hpp"

namespace kiln::detail {

namespace {

/// elementwise(op) over the first `count` (1 to 3) of `operands`.
Array apply_op(OpCode op, const Operand* operands, int count) {
  switch (count) {
    case 1:
      return elementwise(op, {&operands[0]});
    case 2:
      return elementwise(op, {&operands[0], &operands[1]});
    default:
      return elementwise(op, {&operands[0], &operands[1], &operands[2]});
  }
}

/// Values of the weak nodes for this call: arguments, constants, and ops on them computed as kiln would.
std::vector<Scalar> weak_values(const FusionGraph& g, const std::vector<FusionArgument>& args) {
  std::vector<Scalar> values(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const FusionNode& n = g.nodes[i];
    if (!n.weak) continue;
    if (n.kind == FusionNodeKind::Argument) {
      values[i] = args[static_cast<size_t>(n.argument)].scalar;
    } else if (n.kind == FusionNodeKind::Constant) {
      values[i] = n.value;
    } else {
      DeviceGuard guard(cpu());
      Operand operands[3] = {Operand(Scalar()), Operand(Scalar()), Operand(Scalar())};
      for (int k = 0; k < n.num_inputs; ++k) operands[k] = Operand(values[static_cast<size_t>(n.inputs[k])]);
      values[i] = apply_op(n.op, operands, n.num_inputs).item_scalar();
    }
  }
  return values;
}

/// The scalar slots' values from the weak nodes' values (see fusion_slot_values).
std::vector<Scalar> slot_values_of(const FusionGraph& g, const std::vector<Scalar>& weak) {
  std::vector<Scalar> values;
  for (const FusionSlot& slot : g.slots) {
    const FusionNode& user = g.nodes[static_cast<size_t>(slot.user)];
    if (!g.live[static_cast<size_t>(slot.user)]) {
      values.emplace_back();
      continue;
    }
    const Scalar& v = weak[static_cast<size_t>(slot.source)];
    if (user.kind == FusionNodeKind::Cast) {
      values.push_back(v);
      continue;
    }
    OpTypes types{user.compute, user.dtype};
    check_scalar_range(user.op, slot.operand, v, types);  // out of range throws ValueError as the unfused op does
    const bool condition = user.op == OpCode::Where && slot.operand == 0;
    values.push_back(condition ? Scalar(v.to_bool()) : round_scalar(v, slot.compute));
  }
  return values;
}

/// A node's sorted axes as the Axes the reductions take.
Axes axes_of(const Shape& axes) { return Axes(std::vector<int64_t>(axes.begin(), axes.end())); }

Array reduce_with_ops(ReduceOp r, const Array& a, const Shape& axes, bool keepdims) {
  const Axes list = axes_of(axes);
  switch (r) {
#define KILN_REDUCTION(Code, name, api) KILN_WITH_OPS_##api(Code, name)
#define KILN_WITH_OPS_Axes(Code, name) \
  case ReduceOp::Code:                 \
    return name(a, list, keepdims);
#define KILN_WITH_OPS_Own(Code, name)
#define KILN_WITH_OPS_None(Code, name)
#include "kiln/reductions.def"
#undef KILN_WITH_OPS_Axes
#undef KILN_WITH_OPS_Own
#undef KILN_WITH_OPS_None
    default:
      break;
  }
  throw ValueError(std::string("fuse: ") + reduce_op_name(r) + " has no public function taking axes");
}

/// The graph node by node with kiln's ops: exactly the unfused computation (one Array per output).
std::vector<Array> interpret(const FusionGraph& g, const std::vector<FusionArgument>& args,
                             const std::vector<Scalar>& weak, Device device) {
  std::vector<Array> arrays(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const FusionNode& n = g.nodes[i];
    if (n.weak || !g.live[i]) continue;
    switch (n.kind) {
      case FusionNodeKind::Argument:
        arrays[i] = *args[static_cast<size_t>(n.argument)].array;
        break;
      case FusionNodeKind::Constant:
        break;
      case FusionNodeKind::Cast: {
        const size_t in = static_cast<size_t>(n.inputs[0]);
        const FusionNode& src = g.nodes[in];
        arrays[i] = src.weak ? scalar_array(weak[in], src.dtype, device).astype(n.dtype) : arrays[in].astype(n.dtype);
        break;
      }
      case FusionNodeKind::Op: {
        Operand operands[3] = {Operand(Scalar()), Operand(Scalar()), Operand(Scalar())};
        for (int k = 0; k < n.num_inputs; ++k) {
          const size_t in = static_cast<size_t>(n.inputs[k]);
          operands[k] = g.nodes[in].weak ? Operand(weak[in]) : Operand(arrays[in]);
        }
        arrays[i] = apply_op(n.op, operands, n.num_inputs);
        break;
      }
      case FusionNodeKind::Reduce:
        arrays[i] = reduce_with_ops(n.reduction, arrays[static_cast<size_t>(n.inputs[0])], n.axes, n.keepdims);
        break;
    }
  }
  std::vector<Array> results;
  for (int o : g.outputs) results.push_back(arrays[static_cast<size_t>(o)]);
  return results;
}

/// Runtime shapes of the live strong nodes (staged and multi-output graphs).
std::vector<Shape> node_shapes(const FusionGraph& g, const std::vector<FusionArgument>& args, const char* who) {
  std::vector<Shape> shapes(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const FusionNode& n = g.nodes[i];
    if (n.weak || !g.live[i]) continue;
    switch (n.kind) {
      case FusionNodeKind::Argument:
        shapes[i] = args[static_cast<size_t>(n.argument)].array->shape();
        break;
      case FusionNodeKind::Reduce: {
        const Reduction plan = plan_reduction(shapes[static_cast<size_t>(n.inputs[0])], axes_of(n.axes), who);
        shapes[i] = n.keepdims ? plan.keep_shape : plan.out_shape;
        break;
      }
      default:
        for (int k = 0; k < n.num_inputs; ++k)
          if (!g.nodes[static_cast<size_t>(n.inputs[k])].weak)
            shapes[i] = broadcast_shapes(shapes[i], shapes[static_cast<size_t>(n.inputs[k])], who);
        break;
    }
  }
  return shapes;
}

/// `shape` right-aligned into `full`'s rank is `full` with the `axes` set to 1 (a value constant along them).
bool is_reduced_shape(const Shape& shape, const Shape& full, const Shape& axes) {
  if (shape.size() > full.size()) return false;
  const size_t lead = full.size() - shape.size();
  for (size_t d = 0; d < full.size(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    const int64_t size = d < lead ? 1 : shape[d - lead];
    if (size != (reduced ? 1 : full[d])) return false;
  }
  return true;
}


/// Checks the out= arrays against the outputs' shapes and dtypes and the aliasing rule; true when one aliases
/// an input (the same view).
bool check_outputs(const FusionGraph& g, const std::vector<FusionArgument>& args, const Array* results,
                   const std::vector<Shape>& shapes, const Shape& shape, Device device, const std::string& who) {
  bool aliased = false;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Array& out = results[k];
    if (!out.defined()) continue;
    const FusionNode& node = g.nodes[static_cast<size_t>(g.outputs[k])];
    const std::string which = who + ": out= array " + std::to_string(k);
    if (out.device() != device)
      throw DeviceError(which + " is on " + out.device().str() + " and the arguments on " + device.str() +
                        "; pass an output on " + device.str());
    if (out.shape() != shapes[k])
      throw ShapeError(which + " has shape " + shape_str(out.shape()) + " but the output has shape " +
                       shape_str(shapes[k]) + "; pass an array of the output's shape");
    if (out.dtype() != node.dtype)
      throw DTypeError(which + " has dtype " + std::string(dtype_name(out.dtype())) + " but the output is " +
                       std::string(dtype_name(node.dtype)) + "; cast inside the function (.astype) or pass a " +
                       std::string(dtype_name(node.dtype)) + " array");
    for (size_t j = 0; j < k; ++j)
      if (results[j].defined() && overlaps(out, results[j]))
        throw ValueError(which + " overlaps out= array " + std::to_string(j) + "; outputs must not share memory");
    for (size_t a = 0; a < args.size(); ++a) {
      if (!args[a].array || !overlaps(out, *args[a].array)) continue;
      // Element by element: each element of a full-shape output is written after the only reads of it.
      const bool elementwise = node.kind != FusionNodeKind::Reduce && out.shape() == shape;
      if (!same_view(out, *args[a].array) || !elementwise)
        throw ValueError(which + " overlaps argument " + std::to_string(a) + " (shape " +
                         shape_str(args[a].array->shape()) +
                         ") without being the same view of it; an output may only be the very array of an input "
                         "that it replaces element by element: pass a separate array, or that input itself");
      aliased = true;
    }
  }
  return aliased;
}

/// Fills call.outs (and for a staged graph call.full, call.axes) when one kernel serves the call: an
/// elementwise graph whose outputs all have the broadcast shape, or a staged graph whose reductions all reduce
/// the same axes of values of that shape and whose outputs have that shape or the reduced one. `bases`: the
/// output arrays (call.outs holds views of them).
bool plan_outputs(const FusionGraph& g, const std::vector<Shape>& shapes, const std::vector<Shape>& out_shapes,
                  const Shape& shape, const Array* results, Device device, FusionCall& call,
                  std::vector<Array>& bases) {
  if (g.staged) {
    call.axes = g.nodes[static_cast<size_t>(g.reductions[0])].axes;
    if (call.axes.empty()) return false;
    for (int r : g.reductions) {
      const FusionNode& n = g.nodes[static_cast<size_t>(r)];
      if (n.axes != call.axes || shapes[static_cast<size_t>(n.inputs[0])] != shape ||
          !is_reduced_shape(shapes[static_cast<size_t>(r)], shape, call.axes))
        return false;
    }
  }
  const Array* follow[3] = {nullptr, nullptr, nullptr};  // the first array arguments of the full shape
  size_t followed = 0;
  for (const Array* a : call.arrays)
    if (a && followed < 3 && a->shape() == shape) follow[followed++] = a;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const bool full = out_shapes[k] == shape;
    if (!full && !(g.staged && is_reduced_shape(out_shapes[k], shape, call.axes))) return false;
    call.full.push_back(full);
  }
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const DType dtype = g.nodes[static_cast<size_t>(g.outputs[k])].dtype;
    // A full-shape result keeps the arguments' channels-last layout, as the unfused ops' results do.
    Array base = results[k].defined() ? results[k]
                 : call.full[k] ? make_array_following(out_shapes[k], dtype, device, {follow[0], follow[1], follow[2]})
                                : make_array(out_shapes[k], dtype, device);
    if (call.full[k]) {
      call.outs.push_back(base);
    } else {
      Shape keep = shape;
      for (int64_t a : call.axes) keep[static_cast<size_t>(a)] = 1;
      Array view = base.reshape(keep);
      if (!view.shares_storage(base)) return false;  // a non-contiguous out= that reshape had to copy
      call.outs.push_back(view.broadcast_to(shape));
    }
    bases.push_back(std::move(base));
  }
  return true;
}

}  // namespace

/// Byte range [lo, hi) that `a` touches (hi == lo for an empty array).
std::pair<uintptr_t, uintptr_t> byte_range(const Array& a) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(a.data_ptr());
  if (a.size() == 0) return {base, base};
  intptr_t lo = 0, hi = 0;
  for (int64_t d = 0; d < a.ndim(); ++d) {
    const intptr_t step =
        static_cast<intptr_t>(a.strides()[static_cast<size_t>(d)] * (a.shape()[static_cast<size_t>(d)] - 1));
    (step < 0 ? lo : hi) += step;
  }
  const intptr_t item = static_cast<intptr_t>(itemsize(a.dtype()));
  return {base + static_cast<uintptr_t>(lo * item), base + static_cast<uintptr_t>(hi * item + item)};
}

bool overlaps(const Array& a, const Array& b) {
  if (!a.shares_storage(b)) return false;
  const auto [alo, ahi] = byte_range(a);
  const auto [blo, bhi] = byte_range(b);
  return alo < bhi && blo < ahi;
}

bool same_view(const Array& a, const Array& b) {
  return a.data_ptr() == b.data_ptr() && a.shape() == b.shape() && a.strides() == b.strides() && a.dtype() == b.dtype();
}

/// True when grad mode is on and an array argument requires grad: the graph then runs op by op with kiln's ops,
/// which autograd records (throws ValueError naming the function when it has out= arrays).
static bool fusion_records_gradients(const std::vector<FusionArgument>& args, const std::string& name, bool has_out) {
  if (!grad_mode()) return false;
  bool records = false;
  for (const FusionArgument& a : args) records |= a.array && requires_grad(*a.array);
  if (records && has_out)
    throw ValueError("fuse(" + name +
                     "): out= arrays while an argument requires grad; autograd does not record "
                     "in-place writes: call it without out=, or under a NoGradGuard (optimizer steps)");
  return records;
}

std::vector<Scalar> fusion_slot_values(const FusionGraph& g, const std::vector<FusionArgument>& args) {
  return slot_values_of(g, weak_values(g, args));
}

void fusion_run(const FusionGraph& g, const std::vector<FusionArgument>& args, Array* results, size_t count) {
  const std::string who = "fuse(" + g.name + ")";
  assert(count == g.outputs.size());
  bool has_out = false;
  for (size_t k = 0; k < count; ++k)
    if (results[k].defined()) {
      note_inplace_write(results[k], who.c_str());
      has_out = true;
    }
  const bool records = fusion_records_gradients(args, g.name, has_out);
  // Device and shape of the array arguments the graph reads.
  const Array* first = nullptr;
  Shape shape;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const FusionNode& n = g.nodes[i];
    if (n.kind != FusionNodeKind::Argument || n.weak || !g.live[i]) continue;
    const Array& a = *args[static_cast<size_t>(n.argument)].array;
    if (!first) {
      first = &a;
    } else if (a.device() != first->device()) {
      throw DeviceError(who + ": arguments are on different devices, " + first->device().str() + " and " +
                        a.device().str() + "; move one with .to(" + first->device().str() +
                        ") so all live on the same device (kiln never copies behind your back)");
    }
    shape = broadcast_shapes(shape, a.shape(), who.c_str());
  }
  if (!first)
    throw ValueError(who + ": the result does not read any Array argument; fuse computes array values from arrays");
  const Device device = first->device();
  std::vector<Scalar> weak = weak_values(g, args);

  FusionCall call;
  call.graph = &g;
  call.slot_values = slot_values_of(g, weak);
  bool any_out = false;
  for (size_t k = 0; k < g.outputs.size(); ++k) any_out = any_out || results[k].defined();

  // The output shapes: the broadcast shape (elementwise), the reduction's (classic), or traced per node.
  const FusionNode* reduce = g.reduce >= 0 ? &g.nodes[static_cast<size_t>(g.reduce)] : nullptr;
  Reduction plan;
  plan.keep_shape = shape;
  std::vector<Shape> out_shapes(g.outputs.size(), shape);
  std::vector<Shape> shapes;
  if (reduce) {
    // The reduced value reads every live array argument, so its rank is the broadcast shape's.
    assert(static_cast<int64_t>(shape.size()) == g.nodes[static_cast<size_t>(g.elementwise)].ndim);
    plan = plan_reduction(shape, axes_of(reduce->axes), who.c_str());
    out_shapes[0] = reduce->keepdims ? plan.keep_shape : plan.out_shape;
  } else if (g.outputs.size() > 1 || g.staged) {
    shapes = node_shapes(g, args, who.c_str());
    for (size_t k = 0; k < g.outputs.size(); ++k) out_shapes[k] = shapes[static_cast<size_t>(g.outputs[k])];
  }
  if (any_out) call.aliased = check_outputs(g, args, results, out_shapes, shape, device, who);

  Backend& backend = backend_for(device);
  if (!records && shape_numel(shape) > 0) {
    std::vector<Array> views(args.size());
    call.arrays.assign(args.size(), nullptr);
    for (size_t id = 0; id < g.nodes.size(); ++id) {
      const FusionNode& n = g.nodes[id];
      if (n.kind != FusionNodeKind::Argument || n.weak || !g.live[id]) continue;
      const size_t i = static_cast<size_t>(n.argument);
      const Array& a = *args[i].array;
      views[i] = a.shape() == shape ? a : a.broadcast_to(shape);
      call.arrays[i] = &views[i];
    }
    call.shape = shape;
    if (reduce) {
      if (!plan.axes.empty()) {
        DType out_dtype = reduce->reduction == ReduceOp::Mean ? DType::Float64 : reduce->dtype;
        call.outs.push_back(make_array(plan.keep_shape, out_dtype, device));
        if (backend.fused(call)) {
          Array result = call.outs[0];
          if (reduce->reduction == ReduceOp::Mean)
            result = divide(result, static_cast<double>(plan.count)).astype(reduce->dtype);  // as kiln::mean does
          if (!reduce->keepdims) result = result.reshape(plan.out_shape);
          if (results[0].defined())
            results[0].assign(result);
          else
            results[0] = result;
          return;
        }
      }
    } else if (std::vector<Array> bases; plan_outputs(g, shapes, out_shapes, shape, results, device, call, bases)) {
      if (backend.fused(call)) {
        for (size_t k = 0; k < g.outputs.size(); ++k) results[k] = std::move(bases[k]);
        return;
      }
    }
  }
  std::vector<Array> values = interpret(g, args, weak, device);
  for (size_t k = 0; k < values.size(); ++k) {
    if (results[k].defined())
      results[k].assign(values[k]);
    else
      results[k] =
          g.nodes[static_cast<size_t>(g.outputs[k])].kind == FusionNodeKind::Argument ? values[k].copy() : values[k];
  }
}

}  // namespace kiln::detail
