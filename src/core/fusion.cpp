// kiln::fuse: tracing a function into an expression graph (typed with the same
// rules as the unfused ops, resolve_op_types), the per-signature cache of graphs,
// and running a graph: through the device's backend as one kernel when it can
// (Backend::fused), else node by node with kiln's own ops (the CPU, and the rare
// degenerate cases: empty arrays, empty reductions).
#include "core/fusion.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/backend.hpp"
#include "core/elementwise.hpp"
#include "core/reduce.hpp"
#include "kiln/fuse.hpp"

namespace kiln::detail {

const char* fusion_reduction_name(FusionReduction r) {
  constexpr const char* names[] = {"sum", "prod", "max", "min", "mean", "all", "any"};
  return names[static_cast<int>(r)];
}

class FusionCache {
 public:
  mutable std::mutex mutex;
  std::map<std::string, std::shared_ptr<const FusionGraph>> graphs;
};

/// The graph under construction while a fused function runs on FusionValues.
class FusionTrace {
 public:
  /// Built in place and handed to the cache as it is (FusionGraph holds a mutex: it cannot be moved).
  std::shared_ptr<FusionGraph> graph = std::make_shared<FusionGraph>();
  std::vector<bool> reduced;  ///< per node: the final reduction or computed from it

  std::string who() const { return "fuse(" + graph->name + ")"; }
  int add(FusionNode node, bool from_reduction = false) {
    graph->nodes.push_back(std::move(node));
    reduced.push_back(from_reduction);
    return static_cast<int>(graph->nodes.size()) - 1;
  }
};

namespace {

thread_local FusionTrace* t_trace = nullptr;

struct TraceScope {
  explicit TraceScope(FusionTrace* t) : previous(t_trace) { t_trace = t; }
  ~TraceScope() { t_trace = previous; }
  FusionTrace* previous;
};

std::string signature(const std::vector<FusionArgument>& args) {
  std::string s;
  for (const FusionArgument& a : args) {
    if (a.array) {
      if (!a.array->defined())
        throw ValueError("fuse: an argument is an undefined (default-constructed) Array; create it first");
      s += 'a';
      s += static_cast<char>('0' + static_cast<int>(a.array->dtype()));
      s += std::to_string(a.array->ndim());
    } else {
      s += 's';
      s += static_cast<char>('0' + static_cast<int>(a.scalar.kind()));
    }
    s += ',';
  }
  return s;
}

Scalar::Kind kind_of(DType t) {
  return t == DType::Bool ? Scalar::Kind::Bool : is_floating(t) ? Scalar::Kind::Float : Scalar::Kind::Int;
}

OpCode op_by_name(const char* name, int arity) {
  for (int i = 0; i < static_cast<int>(OpCode::Count); ++i) {
    const OpInfo& info = op_info(static_cast<OpCode>(i));
    if (info.arity == arity && std::strcmp(info.name, name) == 0) return static_cast<OpCode>(i);
  }
  throw ValueError(std::string("fuse: no elementwise op named ") + name);
}

FusionReduction reduction_by_name(const char* name) {
  for (FusionReduction r : {FusionReduction::Sum, FusionReduction::Prod, FusionReduction::Max, FusionReduction::Min,
                            FusionReduction::Mean, FusionReduction::All, FusionReduction::Any})
    if (std::strcmp(fusion_reduction_name(r), name) == 0) return r;
  throw ValueError(std::string("fuse: no reduction named ") + name);
}

FusionTrace& current_trace(const char* op) {
  if (!t_trace)
    throw ValueError(std::string("fuse: ") + op +
                     " on a FusionValue outside the function being traced; "
                     "FusionValues only live while kiln::fuse traces a function");
  return *t_trace;
}

[[noreturn]] void reduction_not_last(const FusionTrace& trace, const char* op) {
  throw ValueError(
      trace.who() + ": " + op +
      " uses the result of a reduction, but a fused function may only end "
      "in one reduction; split the function in two (one fuse() up to the reduction, another for the rest)");
}

/// The node of one operand (a constant becomes a new weak node).
int operand_node(FusionTrace& trace, const FusionOperand& o, const char* op) {
  if (o.captured_array())
    throw ValueError(trace.who() + ": " + op +
                     " uses an Array that is not an argument of the fused function "
                     "(captured); pass it as an argument instead");
  if (o.is_value()) {
    if (o.value().trace() != &trace)
      throw ValueError(trace.who() + ": " + op + " mixes FusionValues of another traced function");
    if (trace.reduced[static_cast<size_t>(o.value().node())]) reduction_not_last(trace, op);
    return o.value().node();
  }
  FusionNode node;
  node.kind = FusionNodeKind::Constant;
  node.weak = true;
  node.value = o.scalar();
  node.dtype = o.scalar().default_dtype();
  return trace.add(node);
}

DType scalar_kernel_argument_dtype(OpCode op, int operand, DType compute) {
  if (op == OpCode::Where && operand == 0) return DType::Bool;
  return compute == DType::Float16 || compute == DType::BFloat16 ? DType::Float32 : compute;
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

uint64_t graph_hash(const FusionGraph& g) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const FusionNode& n : g.nodes) {
    h = mix(h, static_cast<uint64_t>(n.kind) | uint64_t{n.weak} << 4 | static_cast<uint64_t>(n.dtype) << 8 |
                   static_cast<uint64_t>(n.op) << 16 | static_cast<uint64_t>(n.compute) << 24 |
                   static_cast<uint64_t>(n.reduction) << 32 | uint64_t{n.keepdims} << 40 |
                   static_cast<uint64_t>(n.ndim) << 48);
    for (int k = 0; k < 3; ++k) h = mix(h, static_cast<uint64_t>(n.inputs[k] + 1) << 32 | (n.slots[k] + 1));
    h = mix(h, static_cast<uint64_t>(n.argument + 1));
    for (int64_t a : n.axes) h = mix(h, static_cast<uint64_t>(a));
  }
  return mix(h, static_cast<uint64_t>(g.output));
}

}  // namespace

FusionValue fusion_apply(const char* name, std::initializer_list<FusionOperand> operands) {
  FusionTrace& trace = current_trace(name);
  const int arity = static_cast<int>(operands.size());
  const OpCode op = op_by_name(name, arity);
  FusionNode node;
  node.kind = FusionNodeKind::Op;
  node.op = op;
  node.num_inputs = arity;
  TypingOperand typing[3];
  bool any_strong = false;
  int k = 0;
  for (const FusionOperand& o : operands) {
    const int id = operand_node(trace, o, name);
    const FusionNode& in = trace.graph->nodes[static_cast<size_t>(id)];
    node.inputs[k] = id;
    typing[k].is_array = !in.weak;
    typing[k].dtype = in.dtype;
    typing[k].kind = kind_of(in.dtype);
    if (!in.weak) {
      any_strong = true;
      node.ndim = std::max(node.ndim, in.ndim);
    }
    ++k;
  }
  OpTypes types = resolve_op_types(op, typing, arity);
  node.compute = types.compute;
  node.dtype = types.out;
  if (!any_strong) {
    node.weak = true;  // computed on the host at each call, like the C++ expression it stands for
    node.dtype = Scalar::default_dtype(kind_of(types.out));
    return {&trace, trace.add(node)};
  }
  // A comparison of an integer array with a weak integer computes in int64 when the value does not fit
  // the array's dtype; fused code always does (same results), so the kernel does not depend on the value.
  if (op_info(op).rule == TypeRule::Compare && is_integral(types.compute))
    for (int i = 0; i < arity; ++i)
      if (!typing[i].is_array && typing[i].kind == Scalar::Kind::Int) node.compute = DType::Int64;
  for (int i = 0; i < arity; ++i) {
    const FusionNode& in = trace.graph->nodes[static_cast<size_t>(node.inputs[i])];
    if (!in.weak) continue;
    if (in.kind == FusionNodeKind::Constant) {  // a constant out of range fails now, as the unfused op would
      OpTypes check = types;
      check_scalar_range(op, i, in.value, check);
    }
    FusionSlot slot;
    slot.source = node.inputs[i];
    slot.user = static_cast<int>(trace.graph->nodes.size());
    slot.operand = i;
    slot.compute = node.compute;
    slot.argument_dtype = scalar_kernel_argument_dtype(op, i, node.compute);
    node.slots[i] = static_cast<int>(trace.graph->slots.size());
    trace.graph->slots.push_back(slot);
  }
  return {&trace, trace.add(node)};
}

FusionValue fusion_reduce(const char* name, const FusionValue& x, const Axes& axes, bool keepdims) {
  FusionTrace& trace = current_trace(name);
  const int input = operand_node(trace, FusionOperand(x), name);
  const FusionNode& in = trace.graph->nodes[static_cast<size_t>(input)];
  if (trace.graph->reduce >= 0) reduction_not_last(trace, name);
  if (in.weak) throw ValueError(trace.who() + ": " + name + " of a scalar argument or constant; reduce an array value");
  FusionNode node;
  node.kind = FusionNodeKind::Reduce;
  node.num_inputs = 1;
  node.inputs[0] = input;
  node.keepdims = keepdims;
  node.reduction = reduction_by_name(name);
  node.axes = reduction_axes(axes, in.ndim, name);
  node.ndim = keepdims ? in.ndim : in.ndim - static_cast<int>(node.axes.size());
  switch (node.reduction) {
    case FusionReduction::Sum:
    case FusionReduction::Prod:
      node.dtype = sum_dtype(in.dtype);
      break;
    case FusionReduction::Max:
    case FusionReduction::Min:
      node.dtype = in.dtype;
      break;
    case FusionReduction::Mean:
      node.dtype = mean_dtype(in.dtype);
      break;
    case FusionReduction::All:
    case FusionReduction::Any:
      node.dtype = DType::Bool;
      break;
  }
  const int id = trace.add(node, true);
  trace.graph->reduce = id;
  return {&trace, id};
}

void fusion_not_fusable(const char* op) {
  const std::string who = t_trace ? t_trace->who() : std::string("fuse");
  throw ValueError(who + ": " + op +
                   " cannot be fused (fuse takes elementwise ops and one final reduction); "
                   "split the function: compute " +
                   op + " outside the fused function and pass its result as an argument");
}

std::shared_ptr<FusionCache> make_fusion_cache() { return std::make_shared<FusionCache>(); }

size_t fusion_cache_size(const FusionCache& cache) {
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.graphs.size();
}

std::shared_ptr<const FusionGraph> fusion_lookup(FusionCache& cache, const std::vector<FusionArgument>& args) {
  const std::string key = signature(args);
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.graphs.find(key);
  return it == cache.graphs.end() ? nullptr : it->second;
}

std::shared_ptr<const FusionGraph> fusion_trace(FusionCache& cache, const std::string& name,
                                                const std::vector<FusionArgument>& args,
                                                FusionValue (*trace_fn)(void*, const std::vector<FusionValue>&),
                                                void* context) {
  const std::string key = signature(args);
  FusionTrace trace;
  trace.graph->name = name;
  trace.graph->num_arguments = static_cast<int>(args.size());
  std::vector<FusionValue> values;
  for (size_t i = 0; i < args.size(); ++i) {
    FusionNode node;
    node.kind = FusionNodeKind::Argument;
    node.argument = static_cast<int>(i);
    if (args[i].array) {
      node.dtype = args[i].array->dtype();
      node.ndim = static_cast<int>(args[i].array->ndim());
    } else {
      node.weak = true;
      node.dtype = args[i].scalar.default_dtype();
    }
    trace.graph->argument_is_array.push_back(args[i].array != nullptr);
    values.emplace_back(&trace, trace.add(node));
  }
  FusionValue result{nullptr, -1};
  {
    TraceScope scope(&trace);
    result = trace_fn(context, values);
  }
  if (result.trace() != &trace)
    throw ValueError(trace.who() + ": the function returned a value that it did not compute from its arguments");
  FusionGraph& g = *trace.graph;
  g.output = result.node();
  const FusionNode& out = g.nodes[static_cast<size_t>(g.output)];
  if (out.weak)
    throw ValueError(trace.who() + ": the result does not depend on any Array argument; fuse computes array values");
  if (g.reduce >= 0 && g.output != g.reduce)
    throw ValueError(trace.who() + ": the result is not the reduction (" +
                     fusion_reduction_name(g.nodes[static_cast<size_t>(g.reduce)].reduction) +
                     "); a fused function may only end in one reduction, so return it, or split the function in two");
  g.elementwise = g.reduce >= 0 ? g.nodes[static_cast<size_t>(g.reduce)].inputs[0] : g.output;
  g.live.assign(g.nodes.size(), false);
  g.live[static_cast<size_t>(g.output)] = true;
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (g.live[i])
      for (int k = 0; k < g.nodes[i].num_inputs; ++k) g.live[static_cast<size_t>(g.nodes[i].inputs[k])] = true;
  g.hash = graph_hash(g);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.graphs.try_emplace(key, std::move(trace.graph)).first->second;
}

std::string fusion_describe(const FusionGraph& g) {
  std::string s;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const FusionNode& n = g.nodes[i];
    s += "%" + std::to_string(i) + " = ";
    switch (n.kind) {
      case FusionNodeKind::Argument:
        s += "arg" + std::to_string(n.argument);
        break;
      case FusionNodeKind::Constant:
        s += "const " + n.value.str();
        break;
      case FusionNodeKind::Cast:
        s += "astype %" + std::to_string(n.inputs[0]);
        break;
      case FusionNodeKind::Reduce:
        s += std::string(fusion_reduction_name(n.reduction)) + " %" + std::to_string(n.inputs[0]) + " axes " +
             shape_str(n.axes) + (n.keepdims ? " keepdims" : "");
        break;
      case FusionNodeKind::Op:
        s += op_info(n.op).name;
        for (int k = 0; k < n.num_inputs; ++k) s += (k ? ", %" : " %") + std::to_string(n.inputs[k]);
        if (!n.weak) s += " in " + std::string(dtype_name(n.compute));
        break;
    }
    s += " : " + std::string(n.weak ? "weak " : "") + std::string(dtype_name(n.dtype)) + " ndim " +
         std::to_string(n.ndim) + "\n";
  }
  return s;
}

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

/// A node's sorted axes as the Axes the reductions take.
Axes axes_of(const Shape& axes) { return Axes(std::vector<int64_t>(axes.begin(), axes.end())); }

Array reduce_with_ops(FusionReduction r, const Array& a, const Shape& axes, bool keepdims) {
  const Axes list = axes_of(axes);
  switch (r) {
    case FusionReduction::Sum:
      return sum(a, list, keepdims);
    case FusionReduction::Prod:
      return prod(a, list, keepdims);
    case FusionReduction::Max:
      return max(a, list, keepdims);
    case FusionReduction::Min:
      return min(a, list, keepdims);
    case FusionReduction::Mean:
      return mean(a, list, keepdims);
    case FusionReduction::All:
      return all(a, list, keepdims);
    case FusionReduction::Any:
      return any(a, list, keepdims);
  }
  return a;
}

/// The graph node by node with kiln's ops: exactly the unfused computation.
Array interpret(const FusionGraph& g, const std::vector<FusionArgument>& args, const std::vector<Scalar>& weak,
                Device device) {
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
  return arrays[static_cast<size_t>(g.output)];
}

}  // namespace

Array fusion_run(const FusionGraph& g, const std::vector<FusionArgument>& args) {
  const std::string who = "fuse(" + g.name + ")";
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
  for (const FusionSlot& slot : g.slots) {
    const FusionNode& user = g.nodes[static_cast<size_t>(slot.user)];
    if (!g.live[static_cast<size_t>(slot.user)]) {
      call.slot_values.emplace_back();
      continue;
    }
    const Scalar& v = weak[static_cast<size_t>(slot.source)];
    if (user.kind == FusionNodeKind::Cast) {
      call.slot_values.push_back(v);
      continue;
    }
    OpTypes types{user.compute, user.dtype};
    check_scalar_range(user.op, slot.operand, v, types);  // out of range throws ValueError as the unfused op does
    const bool condition = user.op == OpCode::Where && slot.operand == 0;
    call.slot_values.push_back(condition ? Scalar(v.to_bool()) : round_scalar(v, slot.compute));
  }

  // The final reduction's plan (keepdims shape, count); empty cases go through kiln's ops.
  const FusionNode* reduce = g.reduce >= 0 ? &g.nodes[static_cast<size_t>(g.reduce)] : nullptr;
  Reduction plan;
  plan.keep_shape = shape;
  if (reduce) {
    // The reduced value reads every live array argument, so its rank is the broadcast shape's.
    assert(static_cast<int64_t>(shape.size()) == g.nodes[static_cast<size_t>(g.elementwise)].ndim);
    plan = plan_reduction(shape, axes_of(reduce->axes), who.c_str());
  }
  const bool degenerate = shape_numel(shape) == 0 || (reduce && plan.axes.empty());
  Backend& backend = backend_for(device);
  if (!degenerate && device.type != DeviceType::CPU) {
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
    DType out_dtype = g.nodes[static_cast<size_t>(g.output)].dtype;
    if (reduce && reduce->reduction == FusionReduction::Mean) out_dtype = DType::Float64;
    call.out = make_array(plan.keep_shape, out_dtype, device);
    if (backend.fused(call)) {
      Array result = call.out;
      if (reduce && reduce->reduction == FusionReduction::Mean)
        result = divide(result, static_cast<double>(plan.count)).astype(reduce->dtype);  // as kiln::mean does
      if (reduce && !reduce->keepdims) result = result.reshape(plan.out_shape);
      return result;
    }
  }
  return interpret(g, args, weak, device);
}

}  // namespace kiln::detail

namespace kiln {

DType FusionValue::dtype() const { return trace_->graph->nodes.at(static_cast<size_t>(node_)).dtype; }
int64_t FusionValue::ndim() const { return trace_->graph->nodes.at(static_cast<size_t>(node_)).ndim; }
bool FusionValue::is_scalar() const { return trace_->graph->nodes.at(static_cast<size_t>(node_)).weak; }

FusionValue FusionValue::astype(DType t) const {
  detail::FusionTrace& trace = detail::current_trace("astype");
  const int input = detail::operand_node(trace, detail::FusionOperand(*this), "astype");
  const detail::FusionNode& in = trace.graph->nodes[static_cast<size_t>(input)];
  if (!in.weak && in.dtype == t) return *this;  // Array::astype returns the array itself too
  detail::FusionNode node;
  node.kind = detail::FusionNodeKind::Cast;
  node.num_inputs = 1;
  node.inputs[0] = input;
  node.dtype = t;
  node.compute = t;
  node.ndim = in.weak ? 0 : in.ndim;
  if (in.weak) {  // the kernel reads the weak value as it is (double, int64 or bool) and converts it
    detail::FusionSlot slot;
    slot.source = input;
    slot.user = static_cast<int>(trace.graph->nodes.size());
    slot.compute = in.dtype;
    slot.argument_dtype = in.dtype;
    node.slots[0] = static_cast<int>(trace.graph->slots.size());
    trace.graph->slots.push_back(slot);
  }
  return {&trace, trace.add(node)};
}

FusionValue FusionValue::sum(Axes axes, bool keepdims) const {
  return detail::fusion_reduce("sum", *this, axes, keepdims);
}
FusionValue FusionValue::mean(Axes axes, bool keepdims) const {
  return detail::fusion_reduce("mean", *this, axes, keepdims);
}
FusionValue FusionValue::max(Axes axes, bool keepdims) const {
  return detail::fusion_reduce("max", *this, axes, keepdims);
}
FusionValue FusionValue::min(Axes axes, bool keepdims) const {
  return detail::fusion_reduce("min", *this, axes, keepdims);
}

}  // namespace kiln
