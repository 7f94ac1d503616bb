// kiln::fuse: tracing a function into an expression graph (typed with the same
// rules as the unfused ops, resolve_op_types) and the per-signature cache of graphs
// (fusion_run.cpp runs a graph: through the device's backend, Backend::fused, else
// node by node with kiln's own ops).
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

  std::string who() const { return "fuse(" + graph->name + ")"; }
  int add(FusionNode node) {
    graph->nodes.push_back(std::move(node));
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
  return t == DType::Bool ? Scalar::Kind::Bool
         : is_complex(t)  ? Scalar::Kind::Complex
         : is_floating(t) ? Scalar::Kind::Float
                          : Scalar::Kind::Int;
}

OpCode op_by_name(const char* name, int arity) {
  for (int i = 0; i < static_cast<int>(OpCode::Count); ++i) {
    const OpInfo& info = op_info(static_cast<OpCode>(i));
    if (info.arity == arity && std::strcmp(info.name, name) == 0) return static_cast<OpCode>(i);
  }
  throw ValueError(std::string("fuse: no elementwise op named ") + name);
}

ReduceOp reduction_by_name(const char* name) {
  const std::optional<ReduceOp> op = reduce_op_by_name(name);
  if (!op) throw ValueError(std::string("fuse: no reduction named ") + name);
  if (!reduce_info(*op).fused) fusion_not_fusable(name);
  return *op;
}

FusionTrace& current_trace(const char* op) {
  if (!t_trace)
    throw ValueError(std::string("fuse: ") + op +
                     " on a FusionValue outside the function being traced; "
                     "FusionValues only live while kiln::fuse traces a function");
  return *t_trace;
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
  for (int o : g.outputs) h = mix(h, static_cast<uint64_t>(o));
  return h;
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

namespace {

/// logsumexp traced as kiln::logsumexp computes it: in float64, shifted by the maximum where that is finite.
/// The shift is reduced twice (with and without keepdims) so no reshape is needed.
FusionValue traced_logsumexp(const FusionValue& x, const Axes& axes, bool keepdims) {
  const FusionValue wide = x.astype(DType::Float64);
  const FusionValue m = max(wide, axes, true);
  const FusionValue shifted = sum(exp(wide - where(isfinite(m), m, 0.0)), axes, keepdims);
  const FusionValue m_out = keepdims ? m : max(wide, axes, false);
  return (log(shifted) + where(isfinite(m_out), m_out, 0.0)).astype(float_result_type(x.dtype()));
}

}  // namespace

FusionValue fusion_reduce(const char* name, const FusionValue& x, const Axes& axes, bool keepdims) {
  FusionTrace& trace = current_trace(name);
  const int input = operand_node(trace, FusionOperand(x), name);
  const FusionNode& in = trace.graph->nodes[static_cast<size_t>(input)];
  if (in.weak) throw ValueError(trace.who() + ": " + name + " of a scalar argument or constant; reduce an array value");
  if (std::strcmp(name, reduce_op_name(ReduceOp::LogSumExp)) == 0) return traced_logsumexp(x, axes, keepdims);
  FusionNode node;
  node.kind = FusionNodeKind::Reduce;
  node.num_inputs = 1;
  node.inputs[0] = input;
  node.keepdims = keepdims;
  node.reduction = reduction_by_name(name);
  node.axes = reduction_axes(axes, in.ndim, name);
  node.ndim = keepdims ? in.ndim : in.ndim - static_cast<int>(node.axes.size());
  node.dtype = reduce_result_dtype(node.reduction, in.dtype);
  return {&trace, trace.add(node)};
}

void fusion_not_fusable(const char* op) {
  const std::string who = t_trace ? t_trace->who() : std::string("fuse");
  throw ValueError(who + ": " + op +
                   " cannot be fused (fuse takes elementwise ops and reductions); "
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

std::shared_ptr<const FusionGraph> fusion_trace(
    FusionCache& cache, const std::string& name, const std::vector<FusionArgument>& args,
    std::vector<FusionValue> (*trace_fn)(void*, const std::vector<FusionValue>&), void* context) {
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
  std::vector<FusionValue> results;
  {
    TraceScope scope(&trace);
    results = trace_fn(context, values);
  }
  FusionGraph& g = *trace.graph;
  for (size_t k = 0; k < results.size(); ++k) {
    const std::string which = results.size() > 1 ? " " + std::to_string(k) : "";
    if (results[k].trace() != &trace)
      throw ValueError(trace.who() + ": result" + which +
                       " is a value that the function did not compute from its arguments");
    if (g.nodes[static_cast<size_t>(results[k].node())].weak)
      throw ValueError(trace.who() + ": result" + which +
                       " does not depend on any Array argument; fuse computes array values");
    g.outputs.push_back(results[k].node());
  }
  finish_fusion_graph(g);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.graphs.try_emplace(key, std::move(trace.graph)).first->second;
}

void finish_fusion_graph(FusionGraph& g) {
  g.output = g.outputs.at(0);
  g.live.assign(g.nodes.size(), false);
  for (int o : g.outputs) g.live[static_cast<size_t>(o)] = true;
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (g.live[i])
      for (int k = 0; k < g.nodes[i].num_inputs; ++k) g.live[static_cast<size_t>(g.nodes[i].inputs[k])] = true;
  g.reductions.clear();
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.live[i] && g.nodes[i].kind == FusionNodeKind::Reduce) g.reductions.push_back(static_cast<int>(i));
  g.reduce = g.reductions.size() == 1 && g.outputs.size() == 1 && g.output == g.reductions[0] ? g.output : -1;
  g.staged = !g.reductions.empty() && g.reduce < 0;
  g.complex = false;
  for (const FusionNode& n : g.nodes) g.complex = g.complex || is_complex(n.dtype) || is_complex(n.compute);
  g.elementwise = g.reduce >= 0 ? g.nodes[static_cast<size_t>(g.reduce)].inputs[0] : g.output;
  g.hash = graph_hash(g);
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
        s += std::string(reduce_op_name(n.reduction)) + " %" + std::to_string(n.inputs[0]) + " axes " +
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
