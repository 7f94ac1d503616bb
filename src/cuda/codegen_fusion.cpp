// Source generation for fused kernels (see fusion.hpp for the loops and the
// argument layout). The element function reuses the prelude's op_<name> and
// cast<> of the built-in kernels, so fused code computes exactly what the
// unfused kernels compute, value for value.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "cuda/device_functions.hpp"
#include "cuda/elementwise_layout.hpp"
#include "cuda/fusion.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {

using detail::FusionGraph;
using detail::FusionNode;
using detail::FusionNodeKind;
using detail::OpCode;
using detail::ReduceOp;

namespace {

std::string v(int id) { return "v" + std::to_string(id); }

/// Storage dtype of array argument k of the kernel.
DType input_dtype(const FusionGraph& g, const std::vector<int>& inputs, size_t k) {
  for (const FusionNode& n : g.nodes)
    if (n.kind == FusionNodeKind::Argument && n.argument == inputs[k]) return n.dtype;
  return DType::Float32;
}

/// The expression of elementwise node `id` (its operands named v<id>, slots s<j>, array argument k `arg(k)`).
template <class A>
std::string node_expr(const FusionGraph& g, const std::vector<int>& inputs, int id, A arg) {
  const FusionNode& n = g.nodes[static_cast<size_t>(id)];
  const std::string type = device_type_name(n.dtype);
  switch (n.kind) {
    case FusionNodeKind::Argument: {
      size_t k = 0;
      while (inputs[k] != n.argument) ++k;
      return arg(k);
    }
    case FusionNodeKind::Cast:
      return "kd::cast<" + type + ">(" + (n.slots[0] >= 0 ? "s" + std::to_string(n.slots[0]) : v(n.inputs[0])) + ")";
    case FusionNodeKind::Op: {
      const DType c = kernel_compute_dtype(n.compute);
      if (!elementwise_op_supported(n.op, c))
        throw DTypeError(std::string("fuse(") + g.name + "): " + detail::op_info(n.op).name +
                         " has no GPU kernel for compute dtype " + std::string(dtype_name(n.compute)));
      std::string e = "kd::cast<" + type + ">(kd::op_" + detail::op_info(n.op).name + "<" + device_type_name(c) + ">(";
      for (int k = 0; k < n.num_inputs; ++k) {
        e += k ? ", " : "";
        if (n.slots[k] >= 0) {
          e += "s" + std::to_string(n.slots[k]);  // already of the op's (kernel) compute type, or bool
        } else {
          const bool condition = n.op == OpCode::Where && k == 0;
          e += "kd::cast<" + std::string(condition ? "bool" : device_type_name(c)) + ">(" + v(n.inputs[k]) + ")";
        }
      }
      return e + "))";
    }
    default:
      throw ValueError("fuse codegen: unexpected node kind in an elementwise part");
  }
}

/// Marks in `need` the strong nodes that `targets` read, stopping at nodes already `have` (computed earlier).
std::vector<bool> needed(const FusionGraph& g, const std::vector<int>& targets, const std::vector<bool>& have) {
  std::vector<bool> need(g.nodes.size(), false);
  for (int t : targets) need[static_cast<size_t>(t)] = true;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const FusionNode& n = g.nodes[i];
    if (!need[i] || n.weak || have[i] || n.kind == FusionNodeKind::Reduce) continue;
    for (int k = 0; k < n.num_inputs; ++k) need[static_cast<size_t>(n.inputs[k])] = true;
  }
  return need;
}

/// Statements `const T v<id> = ...;` for the needed strong nodes not in `have`, in order.
template <class A>
void emit_nodes(std::string& s, const FusionGraph& g, const std::vector<int>& inputs, const std::vector<bool>& need,
                const std::vector<bool>& have, const std::string& indent, A arg) {
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    const FusionNode& n = g.nodes[id];
    if (!need[id] || n.weak || have[id] || n.kind == FusionNodeKind::Reduce) continue;
    s += indent + "const " + std::string(device_type_name(n.dtype)) + " " + v(static_cast<int>(id)) + " = " +
         node_expr(g, inputs, static_cast<int>(id), arg) + ";\n";
  }
}

/// The nodes an elementwise kernel writes: the outputs, or the classic reduction's input.
std::vector<int> element_targets(const FusionGraph& g) {
  return g.reduce >= 0 ? std::vector<int>{g.elementwise} : g.outputs;
}

/// `__device__ void element(R0& r0, ..., const T0 a0, ..., const S0 s0, ...)`: the graph's elementwise part at
/// one index, storing each target into r<k>.
std::string element_function(const FusionGraph& g, const std::vector<int>& inputs) {
  const std::vector<int> targets = element_targets(g);
  std::string s = "__device__ __forceinline__ void element(";
  for (size_t k = 0; k < targets.size(); ++k)
    s += (k ? ", " : "") + std::string(device_type_name(g.nodes[static_cast<size_t>(targets[k])].dtype)) + "& r" +
         std::to_string(k);
  for (size_t k = 0; k < inputs.size(); ++k)
    s += ", const " + std::string(device_type_name(input_dtype(g, inputs, k))) + " a" + std::to_string(k);
  for (size_t j = 0; j < g.slots.size(); ++j)
    s += ", const " + std::string(device_type_name(g.slots[j].argument_dtype)) + " s" + std::to_string(j);
  s += ") {\n";
  const std::vector<bool> none(g.nodes.size(), false);
  emit_nodes(s, g, inputs, needed(g, targets, none), none, "  ", [](size_t k) { return "a" + std::to_string(k); });
  for (size_t k = 0; k < targets.size(); ++k) s += "  r" + std::to_string(k) + " = " + v(targets[k]) + ";\n";
  return s + "}\n";
}

/// Storage type of output k of an elementwise or staged kernel.
std::string output_type(const FusionGraph& g, size_t k) {
  return device_type_name(g.nodes[static_cast<size_t>(g.outputs[k])].dtype);
}

/// Parameter list: out0.., inputs, slots, then `extra` (no __restrict__ when an output aliases an input).
std::string parameters(const FusionGraph& g, const std::vector<int>& inputs, const std::vector<std::string>& out_types,
                       bool aliased, const std::string& extra) {
  const std::string restrict_ = aliased ? "* " : "* __restrict__ ";
  std::string s;
  for (size_t k = 0; k < out_types.size(); ++k)
    s += (k ? ", " : "") + out_types[k] + restrict_ + "out" + std::to_string(k);
  for (size_t k = 0; k < inputs.size(); ++k)
    s += ", const " + std::string(device_type_name(input_dtype(g, inputs, k))) + restrict_ + "in" + std::to_string(k);
  for (size_t j = 0; j < g.slots.size(); ++j)
    s += ", const " + std::string(device_type_name(g.slots[j].argument_dtype)) + " s" + std::to_string(j);
  return s + extra;
}

std::vector<std::string> output_types(const FusionGraph& g) {
  std::vector<std::string> types;
  for (size_t k = 0; k < g.outputs.size(); ++k) types.push_back(output_type(g, k));
  return types;
}

/// "element(r0, ..., x0, ..., s0, ...)" with output k written to `res(k)` and input k read as `read(k)`.
template <class W, class R>
std::string element_call(const FusionGraph& g, size_t num_outputs, size_t num_inputs, W res, R read) {
  std::string s = "element(";
  for (size_t k = 0; k < num_outputs; ++k) s += (k ? ", " : "") + res(k);
  for (size_t k = 0; k < num_inputs; ++k) s += ", " + read(k);
  for (size_t j = 0; j < g.slots.size(); ++j) s += ", s" + std::to_string(j);
  return s + ")";
}

void contiguous_kernel(std::string& s, const FusionGraph& g, const std::vector<int>& inputs,
                       const FusionKernelSpec& spec, const std::string& name) {
  const size_t no = g.outputs.size();
  s += spec.index64 ? "typedef unsigned long long IDX;\n" : "typedef unsigned int IDX;\n";
  const int vec = spec.vector_width;
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameters(g, inputs, output_types(g), spec.aliased, ", const IDX n") + ") {\n";
  s += "  const IDX step = (IDX)gridDim.x * blockDim.x;\n";
  s += "  const IDX first = (IDX)blockIdx.x * blockDim.x + threadIdx.x;\n";
  std::string tail_start = "first";
  if (vec > 1) {
    // Several 16-byte loads per input in flight per thread (as the built-in contiguous kernel).
    const int unroll = contiguous_unroll(static_cast<int>(inputs.size()));
    const std::string vs = std::to_string(vec), u = std::to_string(unroll);
    for (size_t k = 0; k < no; ++k) {
      const DType t = g.nodes[static_cast<size_t>(g.outputs[k])].dtype;
      s += "  union VecOut" + std::to_string(k) + " { " + std::string(raw_type(vec * static_cast<int>(itemsize(t)))) +
           " raw; " + output_type(g, k) + " e[" + vs + "]; };\n";
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      const DType t = input_dtype(g, inputs, k);
      s += "  union VecIn" + std::to_string(k) + " { " + raw_type(vec * static_cast<int>(itemsize(t))) + " raw; " +
           device_type_name(t) + " e[" + vs + "]; };\n";
    }
    s += "  const IDX vectors = n / " + vs + ";\n";
    s += "  for (IDX v = first; v < vectors; v += " + u + " * step) {\n";
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::string i = std::to_string(k);
      const DType t = input_dtype(g, inputs, k);
      s += "    VecIn" + i + " x" + i + "[" + u + "];\n";
      s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u)\n      if (v + u * step < vectors) x" + i +
           "[u].raw = reinterpret_cast<const " + raw_type(vec * static_cast<int>(itemsize(t))) + "*>(in" + i +
           ")[v + u * step];\n";
    }
    s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u) {\n      if (v + u * step >= vectors) break;\n";
    for (size_t k = 0; k < no; ++k) s += "      VecOut" + std::to_string(k) + " y" + std::to_string(k) + ";\n";
    s += "#pragma unroll\n      for (int j = 0; j < " + vs + "; ++j) " +
         element_call(
             g, no, inputs.size(), [](size_t k) { return "y" + std::to_string(k) + ".e[j]"; },
             [](size_t k) { return "x" + std::to_string(k) + "[u].e[j]"; }) +
         ";\n";
    for (size_t k = 0; k < no; ++k) {
      const DType t = g.nodes[static_cast<size_t>(g.outputs[k])].dtype;
      s += "      reinterpret_cast<" + std::string(raw_type(vec * static_cast<int>(itemsize(t)))) + "*>(out" +
           std::to_string(k) + ")[v + u * step] = y" + std::to_string(k) + ".raw;\n";
    }
    s += "    }\n  }\n";
    tail_start = "vectors * " + vs + " + first";
  }
  s += "  for (IDX i = " + tail_start + "; i < n; i += step) " +
       element_call(
           g, no, inputs.size(), [](size_t k) { return "out" + std::to_string(k) + "[i]"; },
           [](size_t k) { return "in" + std::to_string(k) + "[i]"; }) +
       ";\n}\n";
}

void strided_kernel(std::string& s, const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                    const std::string& name) {
  const int nd = spec.ndim;
  const size_t no = g.outputs.size();
  const int operands = static_cast<int>(no + inputs.size());
  const int stride_base = spec.index64 ? nd : 3 * nd;
  s += spec.index64 ? "typedef unsigned long long IDX;\ntypedef long long OFF;\n"
                    : "typedef unsigned int IDX;\ntypedef int OFF;\n";
  s += "struct Params { IDX w[" + std::to_string(stride_base + operands * nd) + "]; };\n";
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameters(g, inputs, output_types(g), spec.aliased, ", const Params p, const IDX n") + ") {\n";
  const std::string u = std::to_string(spec.unroll);
  s += "  const IDX step = (IDX)gridDim.x * blockDim.x;\n";
  s += "  for (IDX base = (IDX)blockIdx.x * blockDim.x + threadIdx.x; base < n; base += " + u + " * step) {\n";
  for (size_t k = 0; k < no; ++k) s += "    OFF out_off" + std::to_string(k) + "[" + u + "];\n";
  for (size_t k = 0; k < inputs.size(); ++k)
    s +=
        "    " + std::string(device_type_name(input_dtype(g, inputs, k))) + " x" + std::to_string(k) + "[" + u + "];\n";
  s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u) {\n";
  s += "      const IDX i = base + u * step;\n      if (i >= n) break;\n";
  emit_strided_offsets(s, nd, operands, spec.index64, "      ");
  for (size_t k = 0; k < no; ++k) s += "      out_off" + std::to_string(k) + "[u] = o" + std::to_string(k) + ";\n";
  for (size_t k = 0; k < inputs.size(); ++k)
    s += "      x" + std::to_string(k) + "[u] = in" + std::to_string(k) + "[o" + std::to_string(k + no) + "];\n";
  s += "    }\n";
  s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u) {\n      if (base + u * step >= n) break;\n";
  s += "      " +
       element_call(
           g, no, inputs.size(),
           [](size_t k) { return "out" + std::to_string(k) + "[out_off" + std::to_string(k) + "[u]]"; },
           [](size_t k) { return "x" + std::to_string(k) + "[u]"; }) +
       ";\n    }\n  }\n}\n";
}

/// `OFF o<k> = k<k> + (reduced offset of r)` for each operand k in `operands` (rows and reduce Params layout).
void emit_reduced_offsets(std::string& s, const std::vector<int>& operands, int kn, int rn, const std::string& in) {
  const int per = kn + rn, base = kn + rn;
  for (int k : operands) s += in + "OFF o" + std::to_string(k) + " = k" + std::to_string(k) + ";\n";
  s += in + "{\n" + in + "  IDX rem = r;\n";
  s += "#pragma unroll\n" + in + "  for (int d = " + std::to_string(rn - 1) + "; d >= 0; --d) {\n";
  s += in + "    const IDX q = d > 0 ? rem / p.w[" + std::to_string(kn) + " + d] : 0;\n";
  s += in + "    const OFF rr = (OFF)(rem - q * p.w[" + std::to_string(kn) + " + d]);\n" + in + "    rem = q;\n";
  for (int k : operands)
    s += in + "    o" + std::to_string(k) + " += rr * (OFF)p.w[" + std::to_string(base + k * per + kn) + " + d];\n";
  s += in + "  }\n" + in + "}\n";
}

/// `OFF k<k>` = operand k's offset of kept index o, for operands 0..count-1 (rows and reduce Params layout).
void emit_kept_offsets(std::string& s, int count, int kn, int rn) {
  const int per = kn + rn, base = kn + rn;
  for (int k = 0; k < count; ++k) s += "    OFF k" + std::to_string(k) + " = 0;\n";
  if (kn == 0) return;
  s += "    {\n      IDX rem = o;\n";
  s += "#pragma unroll\n      for (int d = " + std::to_string(kn - 1) + "; d >= 0; --d) {\n";
  s += "        const IDX q = d > 0 ? rem / p.w[d] : 0;\n        const OFF r = (OFF)(rem - q * p.w[d]);\n";
  s += "        rem = q;\n";
  for (int k = 0; k < count; ++k)
    s += "        k" + std::to_string(k) + " += r * (OFF)p.w[" + std::to_string(base + k * per) + " + d];\n";
  s += "      }\n    }\n";
}

std::string reduce_operator(const FusionKernelSpec& spec) {
  if (detail::is_index_reduction(spec.op))
    throw ValueError("fuse codegen: argmax/argmin cannot end a fused function");
  return reduce_operator_type(spec.op, spec.acc);
}

void reduce_kernel(std::string& s, const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                   const std::string& name) {
  const int kn = spec.kept_ndim, rn = spec.reduced_ndim, ni = static_cast<int>(inputs.size());
  const int G = spec.group;
  const std::string acc = device_type_name(spec.acc);
  const std::string elem = device_type_name(g.nodes[static_cast<size_t>(g.elementwise)].dtype);
  s += spec.index64 ? "typedef unsigned long long IDX;\ntypedef long long OFF;\n"
                    : "typedef unsigned int IDX;\ntypedef int OFF;\n";
  s += "typedef " + acc + " ACC;\ntypedef " + reduce_operator(spec) + " Op;\n";
  // Params: kept size [kn], reduced size [rn], per input kept stride [kn] + reduced stride [rn], then 4 scalars.
  const int scalars = (kn + rn) * (1 + ni);
  s += "struct Params { IDX w[" + std::to_string(scalars + 4) + "]; };\n";
  s += "__device__ __forceinline__ ACC load(" + elem + " x) { return " + reduce_load_expression(spec.op, acc, "x") +
       "; }\n";
  const std::string out_type = spec.to_partials ? acc : device_type_name(spec.out);
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameters(g, inputs, {out_type}, false, ", const Params p") + ") {\n";
  s += "  const IDX num_out = p.w[" + std::to_string(scalars) + "], num_red = p.w[" + std::to_string(scalars + 1) +
       "], splits = p.w[" + std::to_string(scalars + 2) + "], chunk = p.w[" + std::to_string(scalars + 3) + "];\n";
  s += "  const IDX lane = threadIdx.x % " + std::to_string(G) + ";\n";
  if (G == kBlockSize) s += "  __shared__ ACC warp_acc[" + std::to_string(kBlockSize / 32) + "];\n";
  const std::string groups = std::to_string(kBlockSize / G);
  s += "  const IDX tasks = num_out * splits;\n";
  s += "  for (IDX task = (IDX)blockIdx.x * " + groups + " + threadIdx.x / " + std::to_string(G) +
       "; task < tasks; task += (IDX)gridDim.x * " + groups + ") {\n";
  // Split-major tasks: adjacent tasks are adjacent outputs (coalesced loads for group 1).
  s += "    const IDX split = task / num_out, o = task - split * num_out;\n";
  emit_kept_offsets(s, ni, kn, rn);
  s += "    const IDX r0 = split * chunk;\n    const IDX r1 = r0 + chunk < num_red ? r0 + chunk : num_red;\n";
  s += "    ACC acc = Op::identity();\n";
  s += "#pragma unroll 4\n    for (IDX r = r0 + lane; r < r1; r += " + std::to_string(G) + ") {\n";
  std::vector<int> all_inputs;
  for (int k = 0; k < ni; ++k) all_inputs.push_back(k);
  emit_reduced_offsets(s, all_inputs, kn, rn, "      ");
  s += "      " + elem + " e;\n      " +
       element_call(
           g, 1, inputs.size(), [](size_t) { return std::string("e"); },
           [](size_t k) { return "in" + std::to_string(k) + "[o" + std::to_string(k) + "]"; }) +
       ";\n      acc = Op::combine(acc, load(e));\n    }\n";
  emit_group_combine(s, G);
  s += "    if (lane == 0) out0[" + std::string(spec.to_partials ? "o * splits + split" : "o") + "] = " +
       (spec.to_partials ? std::string("acc") : "kd::cast<" + std::string(device_type_name(spec.out)) + ">(acc)") +
       ";\n  }\n}\n";
}

void rows_kernel(std::string& s, const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                 const std::string& name) {
  const int kn = spec.kept_ndim, rn = spec.reduced_ndim, ni = static_cast<int>(inputs.size());
  const int no = static_cast<int>(g.outputs.size()), operands = ni + no, G = spec.group;
  const int scalars = (kn + rn) * (1 + operands);
  s += spec.index64 ? "typedef unsigned long long IDX;\ntypedef long long OFF;\n"
                    : "typedef unsigned int IDX;\ntypedef int OFF;\n";
  s += "struct Params { IDX w[" + std::to_string(scalars + 2) + "]; };\n";
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameters(g, inputs, output_types(g), spec.aliased, ", const Params p") + ") {\n";
  s += "  const IDX num_out = p.w[" + std::to_string(scalars) + "], num_red = p.w[" + std::to_string(scalars + 1) +
       "];\n";
  s += "  const IDX lane = threadIdx.x % " + std::to_string(G) + ";\n";
  auto acc_dtype = [&](const FusionNode& n) {
    const ReduceOp op = fusion_reduce_op(n.reduction);
    const DType out = n.reduction == ReduceOp::Mean ? DType::Float64 : n.dtype;
    return reduce_accumulator_dtype(op, g.nodes[static_cast<size_t>(n.inputs[0])].dtype, out);
  };
  if (G == kBlockSize)
    for (int rid : g.reductions)
      s += "  __shared__ " + std::string(device_type_name(acc_dtype(g.nodes[static_cast<size_t>(rid)]))) + " wa" +
           std::to_string(rid) + "[" + std::to_string(kBlockSize / 32) + "];\n";
  const std::string groups = std::to_string(kBlockSize / G);
  s += "  for (IDX o = (IDX)blockIdx.x * " + groups + " + threadIdx.x / " + std::to_string(G) +
       "; o < num_out; o += (IDX)gridDim.x * " + groups + ") {\n";
  emit_kept_offsets(s, operands, kn, rn);
  std::vector<int> all_inputs;
  for (int k = 0; k < ni; ++k) all_inputs.push_back(k);
  std::vector<bool> have(g.nodes.size(), false);
  auto read_at = [](const char* prefix) {
    return [prefix](size_t k) { return "in" + std::to_string(k) + "[" + prefix + std::to_string(k) + "]"; };
  };
  for (int rid : g.reductions) {  // one pass per reduction
    const FusionNode& n = g.nodes[static_cast<size_t>(rid)];
    const ReduceOp op = fusion_reduce_op(n.reduction);
    const DType acc = acc_dtype(n);
    s += "    " + std::string(device_type_name(n.dtype)) + " " + v(rid) + ";\n    {\n";
    s += "      typedef " + std::string(device_type_name(acc)) + " ACC;\n      typedef " +
         reduce_operator_type(op, acc) + " Op;\n";
    if (G == kBlockSize) s += "      ACC* warp_acc = wa" + std::to_string(rid) + ";\n";
    s += "      ACC acc = Op::identity();\n";
    s += "#pragma unroll 4\n      for (IDX r = lane; r < num_red; r += " + std::to_string(G) + ") {\n";
    emit_reduced_offsets(s, all_inputs, kn, rn, "        ");
    emit_nodes(s, g, inputs, needed(g, {n.inputs[0]}, have), have, "        ", read_at("o"));
    s += "        acc = Op::combine(acc, " + reduce_load_expression(op, device_type_name(acc), v(n.inputs[0])) +
         ");\n      }\n";
    emit_group_combine(s, G);
    if (G == kBlockSize)  // the combined value reached warp 0: share it with the block
      s += "      if (threadIdx.x == 0) warp_acc[0] = acc;\n      __syncthreads();\n      acc = warp_acc[0];\n"
           "      __syncthreads();\n";
    const std::string type = device_type_name(n.dtype);
    s += "      " + v(rid) + " = " +
         (n.reduction == ReduceOp::Mean ? "kd::cast<" + type + ">((double)acc / (double)num_red)"
                                                       : "kd::cast<" + type + ">(acc)") +
         ";\n    }\n";
    have[static_cast<size_t>(rid)] = true;
  }
  std::vector<int> full, kept, full_operands = all_inputs;
  for (int k = 0; k < no; ++k) {
    ((spec.kept_mask >> k) & 1u ? kept : full).push_back(k);
    if (!((spec.kept_mask >> k) & 1u)) full_operands.push_back(ni + k);
  }
  auto targets = [&](const std::vector<int>& ks) {
    std::vector<int> t;
    for (int k : ks) t.push_back(g.outputs[static_cast<size_t>(k)]);
    return t;
  };
  if (!full.empty()) {  // the full-shape outputs: one more pass
    s += "    for (IDX r = lane; r < num_red; r += " + std::to_string(G) + ") {\n";
    emit_reduced_offsets(s, full_operands, kn, rn, "      ");
    emit_nodes(s, g, inputs, needed(g, targets(full), have), have, "      ", read_at("o"));
    for (int k : full)
      s += "      out" + std::to_string(k) + "[o" + std::to_string(ni + k) +
           "] = " + v(g.outputs[static_cast<size_t>(k)]) + ";\n";
    s += "    }\n";
  }
  if (!kept.empty()) {  // the reduced-shape outputs: constant along the row, so read at its start
    s += "    if (lane == 0) {\n";
    emit_nodes(s, g, inputs, needed(g, targets(kept), have), have, "      ", read_at("k"));
    for (int k : kept)
      s += "      out" + std::to_string(k) + "[k" + std::to_string(ni + k) +
           "] = " + v(g.outputs[static_cast<size_t>(k)]) + ";\n";
    s += "    }\n";
  }
  s += "  }\n}\n";
}

/// A multi-tensor kernel: block b updates chunk l.chunk[b] of tensor l.tensor[b] (see MultiTensorTable).
void multi_tensor_kernel(std::string& s, const FusionGraph& g, const std::vector<int>& inputs,
                         const FusionKernelSpec& spec, const std::string& name) {
  const size_t no = g.outputs.size();
  const MultiTensorTable t = multi_tensor_table(static_cast<int>(no + inputs.size()), static_cast<int>(g.slots.size()));
  s += "struct TensorList { void* ptr[" + std::to_string(t.operands) + "][" + std::to_string(t.tensors) +
       "]; long long n[" + std::to_string(t.tensors) + "]; int chunk[" + std::to_string(t.blocks) +
       "]; unsigned char tensor[" + std::to_string(t.blocks) + "]; };\n";
  s += "static_assert(sizeof(TensorList) == " + std::to_string(t.bytes) +
       ", \"the host's MultiTensorTable and this struct disagree\");\n";
  std::string params = "const TensorList l";
  for (size_t j = 0; j < g.slots.size(); ++j)
    params += ", const " + std::string(device_type_name(g.slots[j].argument_dtype)) + " s" + std::to_string(j);
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" + params +
       ") {\n";
  s += "  const int t = l.tensor[blockIdx.x];\n";
  s += "  const long long start = (long long)l.chunk[blockIdx.x] * " + std::to_string(kMultiTensorChunk) + "LL;\n";
  s += "  const long long rest = l.n[t] - start;\n";
  s += "  const int len = rest < " + std::to_string(kMultiTensorChunk) + "LL ? (int)rest : " +
       std::to_string(kMultiTensorChunk) + ";\n";
  for (size_t k = 0; k < no; ++k)
    s += "  " + output_type(g, k) + "* out" + std::to_string(k) + " = (" + output_type(g, k) + "*)l.ptr[" +
         std::to_string(k) + "][t] + start;\n";
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::string type = device_type_name(input_dtype(g, inputs, k));
    const bool one = (spec.broadcast_mask >> k) & 1u;  // one element for the whole tensor
    s += "  const " + type + "* in" + std::to_string(k) + " = (const " + type + "*)l.ptr[" + std::to_string(no + k) +
         "][t]" + (one ? "" : " + start") + ";\n";
  }
  s += "  for (int i = threadIdx.x; i < len; i += blockDim.x) " +
       element_call(
           g, no, inputs.size(), [](size_t k) { return "out" + std::to_string(k) + "[i]"; },
           [&](size_t k) {
             return "in" + std::to_string(k) + ((spec.broadcast_mask >> k) & 1u ? "[0]" : "[i]");
           }) +
       ";\n}\n";
}

}  // namespace

MultiTensorTable multi_tensor_table(int operands, int slots) {
  // The slots follow the table among the kernel's parameters, each at most 8 bytes.
  const int64_t budget = 4096 - 8 * int64_t{slots} - 16;
  MultiTensorTable t;
  t.operands = operands;
  for (t.blocks = 320; t.blocks >= 8; t.blocks /= 2) {
    const int64_t per_tensor = 8 * (int64_t{operands} + 1), room = budget - 5 * int64_t{t.blocks};
    t.tensors = static_cast<int>(std::min<int64_t>(255, room / per_tensor));
    if (t.tensors >= 8) break;
  }
  if (t.tensors < 1)
    throw ValueError("fuse: " + std::to_string(operands) + " arrays and " + std::to_string(slots) +
                     " scalar slots leave no room for a multi-tensor table in 4 KB of kernel parameters; split the "
                     "function");
  const size_t tensors = static_cast<size_t>(t.tensors), blocks = static_cast<size_t>(t.blocks);
  t.pointers = 0;
  t.sizes = t.pointers + static_cast<size_t>(operands) * tensors * sizeof(void*);
  t.chunks = t.sizes + tensors * sizeof(long long);
  t.tensor_of = t.chunks + blocks * sizeof(int32_t);
  t.bytes = (t.tensor_of + blocks + 7) / 8 * 8;
  return t;
}

void check_operand_count(const FusionGraph& g) {
  const size_t inputs = fusion_array_arguments(g).size();
  const size_t operands = inputs + (g.reduce >= 0 ? 1 : g.outputs.size());
  if (operands > static_cast<size_t>(kMaxLayoutOperands))
    throw ValueError("fuse(" + g.name + "): " + std::to_string(inputs) + " array arguments and " +
                     std::to_string(operands - inputs) + " outputs; a fused kernel takes at most " +
                     std::to_string(kMaxLayoutOperands) + " arrays in all, so split the function");
}

std::vector<int> fusion_array_arguments(const FusionGraph& g) {
  std::vector<int> inputs;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const FusionNode& n = g.nodes[i];
    if (n.kind == FusionNodeKind::Argument && !n.weak && g.live[i]) inputs.push_back(n.argument);
  }
  return inputs;
}

ReduceOp fusion_reduce_op(ReduceOp r) {
  // Kernel rows run as themselves; mean (the one composed Fused row that reaches a node) is a float64 sum
  // the kernel or the core divides.
  return detail::is_reduce_kernel(r) ? r : ReduceOp::Sum;
}

std::string fusion_kernel_name(const FusionGraph& g, const FusionKernelSpec& spec) {
  std::string tag;
  for (char c : g.name) tag += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  char hash[20];
  std::snprintf(hash, sizeof hash, "%08x", static_cast<unsigned>(g.hash ^ (g.hash >> 32)));
  std::string name = "kiln_fused_" + tag + "_" + hash;
  switch (spec.layout) {
    case FusionLayout::Contiguous:
      name += "_contig_v" + std::to_string(spec.vector_width);
      break;
    case FusionLayout::Strided:
      name += "_strided" + std::to_string(spec.ndim) + (spec.unroll > 1 ? "_u" + std::to_string(spec.unroll) : "");
      break;
    case FusionLayout::Rows:
      name += "_rows_g" + std::to_string(spec.group) + "_k" + std::to_string(spec.kept_ndim) + "_r" +
              std::to_string(spec.reduced_ndim) + "_m" + std::to_string(spec.kept_mask);
      break;
    case FusionLayout::MultiTensor:
      name += "_multi_b" + std::to_string(spec.broadcast_mask);
      break;
    case FusionLayout::Reduce:
      name += std::string("_") + detail::reduce_op_name(spec.op) + "_a" + dtype_tag(spec.acc) + "_" +
              (spec.to_partials ? std::string("partial") : dtype_tag(spec.out)) + "_g" + std::to_string(spec.group) +
              "_k" + std::to_string(spec.kept_ndim) + "_r" + std::to_string(spec.reduced_ndim);
      break;
  }
  if (spec.aliased) name += "_alias";
  return name + (spec.index64 ? "_i64" : "_i32");
}

std::string fusion_kernel_code(const FusionGraph& g, const FusionKernelSpec& spec) {
  const std::string name = fusion_kernel_name(g, spec);
  const std::vector<int> inputs = fusion_array_arguments(g);
  check_operand_count(g);
  const int v = spec.vector_width;
  if (v < 1 || v > 16 || (v & (v - 1)) != 0) throw ValueError("fuse codegen: bad vector width " + std::to_string(v));
  if (spec.layout != FusionLayout::Contiguous && (spec.ndim < 1 || spec.ndim > kMaxRank))
    throw ValueError("fuse codegen: rank " + std::to_string(spec.ndim) + " is outside 1.." +
                     std::to_string(kMaxRank));
  if ((spec.layout == FusionLayout::Reduce || spec.layout == FusionLayout::Rows) &&
      (spec.kept_ndim < 0 || spec.kept_ndim > kMaxRank || spec.reduced_ndim < 1 ||
       spec.reduced_ndim > kMaxRank ||
       !(spec.group == kBlockSize || (spec.group >= 1 && spec.group <= 32 && (spec.group & (spec.group - 1)) == 0))))
    throw ValueError("fuse codegen: bad reduction spec for " + name);
  std::string s = "// " + name + " (generated by kiln::fuse)\nnamespace " + name + "_ns {\n";
  s.reserve(8192);
  if (spec.layout != FusionLayout::Rows) s += element_function(g, inputs);
  switch (spec.layout) {
    case FusionLayout::Contiguous:
      contiguous_kernel(s, g, inputs, spec, name);
      break;
    case FusionLayout::Strided:
      strided_kernel(s, g, inputs, spec, name);
      break;
    case FusionLayout::Reduce:
      reduce_kernel(s, g, inputs, spec, name);
      break;
    case FusionLayout::Rows:
      rows_kernel(s, g, inputs, spec, name);
      break;
    case FusionLayout::MultiTensor:
      multi_tensor_kernel(s, g, inputs, spec, name);
      break;
  }
  return s + "}  // namespace\n";
}

std::string fusion_source(const FusionGraph& g, const FusionKernelSpec& spec) {
  return device_prelude() + fusion_kernel_code(g, spec);
}

}  // namespace kiln::cuda_impl
