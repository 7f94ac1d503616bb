// Fused::each (multi-tensor apply): the checks of the per-group lists, the scalar
// slots computed once, dense groups handed to the backend's multi_tensor in one
// call, any other group run through fusion_run on its own (see multi_tensor.hpp).
#include "core/multi_tensor.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "kiln/fuse.hpp"

namespace kiln::detail {

bool is_dense(const Array& a) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the axes longer than 1
  for (int64_t d = 0; d < a.ndim(); ++d)
    if (a.shape()[static_cast<size_t>(d)] > 1)
      dims.emplace_back(a.strides()[static_cast<size_t>(d)], a.shape()[static_cast<size_t>(d)]);
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

namespace {

/// `a` and `b` have one shape and walk their memory in the same order (strides equal on axes longer than 1).
bool same_layout(const Array& a, const Array& b) {
  if (a.shape() != b.shape()) return false;
  for (size_t d = 0; d < a.shape().size(); ++d)
    if (a.shape()[d] > 1 && a.strides()[d] != b.strides()[d]) return false;
  return true;
}

constexpr size_t kShared = ~size_t{0};  // the group of an array every tensor reads

/// An array the call touches, for the overlap check.
struct Touch {
  uintptr_t lo = 0, hi = 0;
  const Array* array = nullptr;
  size_t group = 0;  ///< its tensor (kShared: an argument every tensor reads)
  bool output = false;
  size_t index = 0;  ///< its output k or argument a

  /// "output k of tensor i", "argument a of tensor i" or "argument a" (built only for a message).
  std::string what() const {
    return (output ? "output " : "argument ") + std::to_string(index) +
           (group == kShared ? "" : " of tensor " + std::to_string(group));
  }
};

/// Every output overlaps nothing but the very array of an input of its own group (the rule of fuse's out=).
void check_overlaps(std::vector<Touch>& touches, const std::string& who) {
  std::sort(touches.begin(), touches.end(), [](const Touch& a, const Touch& b) { return a.lo < b.lo; });
  for (size_t i = 0; i < touches.size(); ++i) {
    const Touch& a = touches[i];
    for (size_t j = i + 1; j < touches.size() && touches[j].lo < a.hi; ++j) {
      const Touch& b = touches[j];
      if (!a.output && !b.output) continue;
      if (!a.array->shares_storage(*b.array)) continue;
      const Touch& out = a.output ? a : b;
      const Touch& other = a.output ? b : a;
      if (!other.output && other.group == out.group && same_view(*out.array, *other.array)) continue;
      throw ValueError(who + ": " + out.what() + " overlaps " + other.what() +
                       "; an output may only be the very array of an input of its own tensor (read and written "
                       "element by element): pass separate arrays");
    }
  }
}

}  // namespace

size_t fusion_each_count(const std::string& name, const std::vector<FusionEachArgument>& args,
                         const std::vector<std::vector<Array>>& outputs) {
  const std::string who = "fuse(" + name + ").each";
  if (outputs.empty()) throw ValueError(who + ": no output lists; pass one list of arrays per output");
  // Every list (outputs and list arguments) has one entry per tensor.
  const size_t count = outputs[0].size();
  auto check_length = [&](size_t length, const std::string& what) {
    if (length != count)
      throw ValueError(who + ": " + what + " has " + std::to_string(length) + " arrays and output list 0 has " +
                       std::to_string(count) + "; pass one array per tensor in every list");
  };
  for (size_t k = 0; k < outputs.size(); ++k) check_length(outputs[k].size(), "output list " + std::to_string(k));
  for (size_t a = 0; a < args.size(); ++a)
    if (args[a].list) check_length(args[a].list->size(), "argument " + std::to_string(a));
  return count;
}

void fusion_run_each(const FusionGraph& g, const std::vector<FusionEachArgument>& args,
                     const std::vector<std::vector<Array>>& outputs) {
  const std::string who = "fuse(" + g.name + ").each";
  if (!g.reductions.empty() || g.reduce >= 0)
    throw ValueError(who +
                     ": the function reduces; each() applies elementwise functions only: call the fused "
                     "function once per tensor instead");
  if (outputs.size() != g.outputs.size())
    throw ValueError(who + ": " + std::to_string(outputs.size()) + " output lists for " +
                     std::to_string(g.outputs.size()) + " outputs; pass one list of arrays per output");
  const size_t count = fusion_each_count(g.name, args, outputs);
  if (count == 0) return;

  // The array of argument `a` for tensor i (nullptr for a scalar or an argument the graph does not read).
  std::vector<bool> reads(args.size(), false);
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    const FusionNode& n = g.nodes[id];
    if (n.kind == FusionNodeKind::Argument && !n.weak && g.live[id]) reads[static_cast<size_t>(n.argument)] = true;
  }
  auto array_of = [&](size_t a, size_t i) -> const Array* {
    if (!reads[a]) return nullptr;
    return args[a].list ? &(*args[a].list)[i] : args[a].array;
  };
  std::vector<DType> traced(args.size(), DType::Bool);
  for (const FusionNode& n : g.nodes)
    if (n.kind == FusionNodeKind::Argument && !n.weak) traced[static_cast<size_t>(n.argument)] = n.dtype;

  const Array* first = nullptr;
  for (size_t a = 0; a < args.size() && !first; ++a) first = array_of(a, 0);
  if (!first)
    throw ValueError(who + ": the result does not read any Array argument; fuse computes array values from arrays");
  const Device device = first->device();
  const bool recording = grad_mode();

  // Per tensor: the checks, and whether its arrays are dense in one memory order (one range of elements each).
  std::vector<Touch> touches;
  std::vector<bool> dense(count, true);
  std::vector<Shape> shapes(count);
  for (size_t i = 0; i < count; ++i) {
    // Messages are built only when a check fails (this runs for every parameter of every optimizer step).
    auto tensor = [i] { return " of tensor " + std::to_string(i); };
    Shape& shape = shapes[i];
    for (size_t a = 0; a < args.size(); ++a) {
      const Array* x = array_of(a, i);
      if (!x) continue;
      auto what = [&] { return "argument " + std::to_string(a) + (args[a].list ? tensor() : ""); };
      if (!x->defined()) throw ValueError(who + ": " + what() + " is an undefined Array; pass an array");
      if (x->device() != device)
        throw DeviceError(who + ": " + what() + " is on " + x->device().str() + " and the first array on " +
                          device.str() + "; call each() once per device (kiln never copies behind your back)");
      if (x->dtype() != traced[a])
        throw DTypeError(who + ": " + what() + " is " + std::string(dtype_name(x->dtype())) + " but tensor 0's is " +
                         std::string(dtype_name(traced[a])) + "; call each() once per dtype");
      if (recording && requires_grad(*x))
        throw ValueError(who + ": " + what() +
                         " requires grad while grad mode is on; each() writes in place, which autograd does not "
                         "record: call it under a NoGradGuard (optimizer steps)");
      shape = broadcast_shapes(shape, x->shape(), who.c_str());
      if (args[a].list || i == 0) touches.push_back({0, 0, x, args[a].list ? i : kShared, false, a});
    }
    const int64_t size = shape_numel(shape);
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Array& out = outputs[k][i];
      const FusionNode& node = g.nodes[static_cast<size_t>(g.outputs[k])];
      auto what = [&] { return "output " + std::to_string(k) + tensor(); };
      if (!out.defined())
        throw ValueError(who + ": " + what() + " is an undefined Array; each() writes in place: pass an array");
      if (out.device() != device)
        throw DeviceError(who + ": " + what() + " is on " + out.device().str() + " and the arguments on " +
                          device.str() + "; pass an output on " + device.str());
      if (out.shape() != shape)
        throw ShapeError(who + ": " + what() + " has shape " + shape_str(out.shape()) + " but the arguments" +
                         tensor() + " broadcast to " + shape_str(shape) + "; pass an array of that shape");
      if (out.dtype() != node.dtype)
        throw DTypeError(who + ": " + what() + " is " + std::string(dtype_name(out.dtype())) + " but the output is " +
                         std::string(dtype_name(node.dtype)) + "; cast inside the function (.astype) or pass a " +
                         std::string(dtype_name(node.dtype)) + " array");
      touches.push_back({0, 0, &out, i, true, k});
    }
    // Dense: every full-size array in the first output's memory order, the others single elements.
    const Array& lead = outputs.empty() ? *first : outputs[0][i];
    bool ok = is_dense(lead);
    for (size_t k = 0; k < outputs.size() && ok; ++k) ok = same_layout(outputs[k][i], lead);
    for (size_t a = 0; a < args.size() && ok; ++a)
      if (const Array* x = array_of(a, i)) ok = x->size() == 1 || same_layout(*x, lead);
    dense[i] = ok || size == 0;
  }
  for (Touch& t : touches) std::tie(t.lo, t.hi) = byte_range(*t.array);
  std::erase_if(touches, [](const Touch& t) { return t.lo == t.hi; });
  check_overlaps(touches, who);

  // The scalars are the same for every tensor: slot values once.
  std::vector<FusionArgument> scalars(args.size());
  for (size_t a = 0; a < args.size(); ++a) {
    scalars[a].array = array_of(a, 0);
    scalars[a].scalar = args[a].scalar;
  }
  MultiTensorCall call;
  call.graph = &g;
  call.slot_values = fusion_slot_values(g, scalars);
  for (const FusionArgument& a : scalars) call.scalars.push_back(a.scalar);
  for (size_t i = 0; i < count; ++i) {
    if (!dense[i]) {  // its own fused call (strided or broadcast operands)
      std::vector<FusionArgument> group(args.size());
      for (size_t a = 0; a < args.size(); ++a) group[a] = {array_of(a, i), args[a].scalar};
      std::vector<Array> results;
      for (const std::vector<Array>& list : outputs) results.push_back(list[i]);
      fusion_run(g, group, results.data(), results.size());
      continue;
    }
    MultiTensorGroup group;
    group.size = shape_numel(shapes[i]);
    for (size_t a = 0; a < args.size(); ++a) group.arrays.push_back(array_of(a, i));
    for (const std::vector<Array>& list : outputs) {
      note_inplace_write(list[i], who.c_str());
      group.outs.push_back(list[i]);
    }
    if (group.size > 0) call.groups.push_back(std::move(group));
  }
  if (!call.groups.empty()) backend_for(device).multi_tensor(call);
}

}  // namespace kiln::detail
