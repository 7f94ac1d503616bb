// Source generation for fused kernels (see fusion.hpp for the loops and the
// argument layout; the loops are the templates fusion_*.cuh.in of src/cuda/kernels). The element function reuses the prelude's op_<name> and
// cast<> of the built-in kernels, so fused code computes exactly what the
// unfused kernels compute, value for value.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "cuda/device_functions.hpp"
#include "cuda/elementwise_layout.hpp"
#include "cuda/fusion.hpp"
#include "cuda/template.hpp"
#include "kernel_sources/fusion_contiguous.cuh.in.hpp"
#include "kernel_sources/fusion_broadcast.cuh.in.hpp"
#include "kernel_sources/fusion_contiguous_vectors.cuh.in.hpp"
#include "kernel_sources/fusion_multi_tensor.cuh.in.hpp"
#include "kernel_sources/fusion_reduce.cuh.in.hpp"
#include "kernel_sources/fusion_rows.cuh.in.hpp"
#include "kernel_sources/fusion_rows_reduction.cuh.in.hpp"
#include "kernel_sources/fusion_strided.cuh.in.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {

using detail::FusionGraph;
using detail::FusionNode;
using detail::FusionNodeKind;
using detail::OpCode;
using detail::ReduceOp;

namespace {

std::string v(int id) { return "v" + std::to_string(id); }

}  // namespace

DType fusion_input_dtype(const FusionGraph& g, const std::vector<int>& inputs, size_t k) {
  for (const FusionNode& n : g.nodes)
    if (n.kind == FusionNodeKind::Argument && n.argument == inputs[k]) return n.dtype;
  return DType::Float32;
}

std::string fusion_node_expression(const FusionGraph& g, const std::vector<int>& inputs, int id,
                                   const FusionArgument& arg) {
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

std::vector<bool> fusion_needed_nodes(const FusionGraph& g, const std::vector<int>& targets,
                                      const std::vector<bool>& have) {
  std::vector<bool> need(g.nodes.size(), false);
  for (int t : targets) need[static_cast<size_t>(t)] = true;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const FusionNode& n = g.nodes[i];
    if (!need[i] || n.weak || have[i] || n.kind == FusionNodeKind::Reduce) continue;
    for (int k = 0; k < n.num_inputs; ++k) need[static_cast<size_t>(n.inputs[k])] = true;
  }
  return need;
}

void emit_fusion_nodes(std::string& s, const FusionGraph& g, const std::vector<int>& inputs,
                       const std::vector<bool>& need, const std::vector<bool>& have, const std::string& indent,
                       const FusionArgument& arg) {
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    const FusionNode& n = g.nodes[id];
    if (!need[id] || n.weak || have[id] || n.kind == FusionNodeKind::Reduce) continue;
    s += indent + "const " + std::string(device_type_name(n.dtype)) + " " + v(static_cast<int>(id)) + " = " +
         fusion_node_expression(g, inputs, static_cast<int>(id), arg) + ";\n";
  }
}

namespace {

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
    s += ", const " + std::string(device_type_name(fusion_input_dtype(g, inputs, k))) + " a" + std::to_string(k);
  for (size_t j = 0; j < g.slots.size(); ++j)
    s += ", const " + std::string(device_type_name(g.slots[j].argument_dtype)) + " s" + std::to_string(j);
  s += ") {\n";
  const std::vector<bool> none(g.nodes.size(), false);
  emit_fusion_nodes(s, g, inputs, fusion_needed_nodes(g, targets, none), none, "  ",
                    [](size_t k) { return "a" + std::to_string(k); });
  for (size_t k = 0; k < targets.size(); ++k) s += "  r" + std::to_string(k) + " = " + v(targets[k]) + ";\n";
  return s + "}\n";
}

/// Storage type of output k of an elementwise or staged kernel.
std::string output_type(const FusionGraph& g, size_t k) {
  return device_type_name(g.nodes[static_cast<size_t>(g.outputs[k])].dtype);
}

/// Parameter list: out0.., inputs, slots (no __restrict__ when an output aliases an input).
std::string parameters(const FusionGraph& g, const std::vector<int>& inputs, const std::vector<std::string>& out_types,
                       bool aliased) {
  const std::string restrict_ = aliased ? "* " : "* __restrict__ ";
  std::string s;
  for (size_t k = 0; k < out_types.size(); ++k)
    s += (k ? ", " : "") + out_types[k] + restrict_ + "out" + std::to_string(k);
  for (size_t k = 0; k < inputs.size(); ++k)
    s += ", const " + std::string(device_type_name(fusion_input_dtype(g, inputs, k))) + restrict_ + "in" +
         std::to_string(k);
  for (size_t j = 0; j < g.slots.size(); ++j)
    s += ", const " + std::string(device_type_name(g.slots[j].argument_dtype)) + " s" + std::to_string(j);
  return s;
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

std::string index_type(bool index64) { return index64 ? "unsigned long long" : "unsigned int"; }
std::string offset_type(bool index64) { return index64 ? "long long" : "int"; }

std::string contiguous_kernel(const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                              const std::string& name) {
  const size_t no = g.outputs.size();
  const int vec = spec.vector_width;
  std::string loop, tail_start = "first";
  if (vec > 1) {
    const int unroll = contiguous_unroll(static_cast<int>(inputs.size()));
    const std::string vs = std::to_string(vec), u = std::to_string(unroll);
    std::string unions, loads, results, stores;
    for (size_t k = 0; k < no; ++k) {
      const DType t = g.nodes[static_cast<size_t>(g.outputs[k])].dtype;
      unions += "  union VecOut" + std::to_string(k) + " { " +
                std::string(raw_type(vec * static_cast<int>(itemsize(t)))) + " raw; " + output_type(g, k) + " e[" + vs +
                "]; };\n";
      results += "      VecOut" + std::to_string(k) + " y" + std::to_string(k) + ";\n";
      stores += "      reinterpret_cast<" + std::string(raw_type(vec * static_cast<int>(itemsize(t)))) + "*>(out" +
                std::to_string(k) + ")[v + u * step] = y" + std::to_string(k) + ".raw;\n";
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::string i = std::to_string(k);
      const DType t = fusion_input_dtype(g, inputs, k);
      unions += "  union VecIn" + i + " { " + raw_type(vec * static_cast<int>(itemsize(t))) + " raw; " +
                device_type_name(t) + " e[" + vs + "]; };\n";
      loads += "    VecIn" + i + " x" + i + "[" + u + "];\n";
      loads += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u)\n      if (v + u * step < vectors) x" + i +
               "[u].raw = reinterpret_cast<const " + raw_type(vec * static_cast<int>(itemsize(t))) + "*>(in" + i +
               ")[v + u * step];\n";
    }
    loop = fill_template(
        "fusion_contiguous_vectors.cuh.in", kernel_sources::fusion_contiguous_vectors_cuh_in,
        {{"vector_unions", unions},
         {"width", vs},
         {"unroll", u},
         {"loads", loads},
         {"results", results},
         {"element_call", element_call(
                              g, no, inputs.size(), [](size_t k) { return "y" + std::to_string(k) + ".e[j]"; },
                              [](size_t k) { return "x" + std::to_string(k) + "[u].e[j]"; })},
         {"stores", stores}});
    tail_start = "vectors * " + vs + " + first";
  }
  return fill_template(
      "fusion_contiguous.cuh.in", kernel_sources::fusion_contiguous_cuh_in,
      {{"name", name},
       {"element_function", element_function(g, inputs)},
       {"index_type", index_type(spec.index64)},
       {"block_size", std::to_string(kBlockSize)},
       {"parameters", parameters(g, inputs, output_types(g), spec.aliased)},
       {"vector_loop", loop},
       {"tail_start", tail_start},
       {"element_call", element_call(
                            g, no, inputs.size(), [](size_t k) { return "out" + std::to_string(k) + "[i]"; },
                            [](size_t k) { return "in" + std::to_string(k) + "[i]"; })}});
}

std::string strided_kernel(const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                           const std::string& name) {
  const int nd = spec.ndim;
  const size_t no = g.outputs.size();
  const int operands = static_cast<int>(no + inputs.size());
  const int stride_base = spec.index64 ? nd : 3 * nd;
  const std::string u = std::to_string(spec.unroll);
  std::string arrays, offsets, loads;
  for (size_t k = 0; k < no; ++k) arrays += "    OFF out_off" + std::to_string(k) + "[" + u + "];\n";
  for (size_t k = 0; k < inputs.size(); ++k)
    arrays += "    " + std::string(device_type_name(fusion_input_dtype(g, inputs, k))) + " x" + std::to_string(k) +
              "[" + u + "];\n";
  emit_strided_offsets(offsets, nd, operands, spec.index64, "      ");
  for (size_t k = 0; k < no; ++k) loads += "      out_off" + std::to_string(k) + "[u] = o" + std::to_string(k) + ";\n";
  for (size_t k = 0; k < inputs.size(); ++k)
    loads += "      x" + std::to_string(k) + "[u] = in" + std::to_string(k) + "[o" + std::to_string(k + no) + "];\n";
  return fill_template(
      "fusion_strided.cuh.in", kernel_sources::fusion_strided_cuh_in,
      {{"name", name},
       {"element_function", element_function(g, inputs)},
       {"index_type", index_type(spec.index64)},
       {"offset_type", offset_type(spec.index64)},
       {"param_words", std::to_string(stride_base + operands * nd)},
       {"block_size", std::to_string(kBlockSize)},
       {"parameters", parameters(g, inputs, output_types(g), spec.aliased)},
       {"unroll", u},
       {"arrays", arrays},
       {"offsets", offsets},
       {"loads", loads},
       {"element_call",
        element_call(
            g, no, inputs.size(),
            [](size_t k) { return "out" + std::to_string(k) + "[out_off" + std::to_string(k) + "[u]]"; },
            [](size_t k) { return "x" + std::to_string(k) + "[u]"; })}});
}

/// Dense operands in vectors, broadcast inputs (spec.broadcast_mask) per element from their strides (fusion.hpp).
std::string broadcast_kernel(const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                             const std::string& name) {
  const int nd = spec.ndim, vec = spec.vector_width;
  const size_t no = g.outputs.size();
  const std::string vs = std::to_string(vec);
  auto gathered = [&](size_t k) { return (spec.broadcast_mask >> k & 1u) != 0; };
  std::vector<int> offset_of(inputs.size(), -1);  // input k's offset variable g<offset_of[k]>
  int gathers = 0;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (gathered(k)) offset_of[k] = gathers++;
  std::string unions, loads, results, stores;
  for (size_t k = 0; k < no; ++k) {
    const std::string raw = raw_type(vec * static_cast<int>(itemsize(g.nodes[static_cast<size_t>(g.outputs[k])].dtype)));
    unions += "  union VecOut" + std::to_string(k) + " { " + raw + " raw; " + output_type(g, k) + " e[" + vs + "]; };\n";
    results += "    VecOut" + std::to_string(k) + " y" + std::to_string(k) + ";\n";
    stores += "    reinterpret_cast<" + raw + "*>(out" + std::to_string(k) + ")[v] = y" + std::to_string(k) + ".raw;\n";
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (gathered(k)) continue;
    const std::string i = std::to_string(k);
    const DType t = fusion_input_dtype(g, inputs, k);
    const std::string raw = raw_type(vec * static_cast<int>(itemsize(t)));
    unions += "  union VecIn" + i + " { " + raw + " raw; " + device_type_name(t) + " e[" + vs + "]; };\n";
    loads += "    VecIn" + i + " x" + i + ";\n    x" + i + ".raw = reinterpret_cast<const " + raw + "*>(in" + i +
             ")[v];\n";
  }
  std::string offsets;  // the template places them in the vector loop and the tail
  StridedNames names;
  names.offset = "g";
  emit_strided_offsets(offsets, nd, gathers, spec.index64, "      ", names);
  auto read = [&](size_t k, const std::string& dense) {
    return gathered(k) ? "in" + std::to_string(k) + "[g" + std::to_string(offset_of[k]) + "]" : dense;
  };
  const int stride_base = spec.index64 ? nd : 3 * nd;
  return fill_template(
      "fusion_broadcast.cuh.in", kernel_sources::fusion_broadcast_cuh_in,
      {{"name", name},
       {"element_function", element_function(g, inputs)},
       {"index_type", index_type(spec.index64)},
       {"offset_type", offset_type(spec.index64)},
       {"param_words", std::to_string(stride_base + std::max(gathers, 1) * nd)},
       {"block_size", std::to_string(kBlockSize)},
       {"parameters", parameters(g, inputs, output_types(g), spec.aliased)},
       {"vector_unions", unions},
       {"width", vs},
       {"loads", loads},
       {"results", results},
       {"offsets", offsets},
       {"vector_element_call",
        element_call(
            g, no, inputs.size(), [](size_t k) { return "y" + std::to_string(k) + ".e[j]"; },
            [&](size_t k) { return read(k, "x" + std::to_string(k) + ".e[j]"); })},
       {"stores", stores},
       {"element_call", element_call(
                            g, no, inputs.size(), [](size_t k) { return "out" + std::to_string(k) + "[i]"; },
                            [&](size_t k) { return read(k, "in" + std::to_string(k) + "[i]"); })}});
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

std::string reduce_kernel(const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                          const std::string& name) {
  const int kn = spec.kept_ndim, rn = spec.reduced_ndim, ni = static_cast<int>(inputs.size());
  const int G = spec.group;
  const std::string acc = device_type_name(spec.acc);
  const std::string elem = device_type_name(g.nodes[static_cast<size_t>(g.elementwise)].dtype);
  const int scalars = (kn + rn) * (1 + ni);
  const std::string out_type = spec.to_partials ? acc : device_type_name(spec.out);
  std::string kept, reduced, combine;
  emit_kept_offsets(kept, ni, kn, rn);
  std::vector<int> all_inputs;
  for (int k = 0; k < ni; ++k) all_inputs.push_back(k);
  emit_reduced_offsets(reduced, all_inputs, kn, rn, "      ");
  emit_group_combine(combine, G);
  return fill_template(
      "fusion_reduce.cuh.in", kernel_sources::fusion_reduce_cuh_in,
      {{"name", name},
       {"element_function", element_function(g, inputs)},
       {"index_type", index_type(spec.index64)},
       {"offset_type", offset_type(spec.index64)},
       {"acc_type", acc},
       {"operator_type", reduce_operator(spec)},
       {"param_words", std::to_string(scalars + 4)},
       {"element_type", elem},
       {"load", reduce_load_expression(spec.op, acc, "x")},
       {"block_size", std::to_string(kBlockSize)},
       {"parameters", parameters(g, inputs, {out_type}, false)},
       {"scalars", std::to_string(scalars)},
       {"group", std::to_string(G)},
       {"warp_acc", G == kBlockSize ? "  __shared__ ACC warp_acc[" + std::to_string(kBlockSize / 32) + "];" : ""},
       {"groups", std::to_string(kBlockSize / G)},
       {"kept_offsets", kept},
       {"reduced_offsets", reduced},
       {"element_call", element_call(
                            g, 1, inputs.size(), [](size_t) { return std::string("e"); },
                            [](size_t k) { return "in" + std::to_string(k) + "[o" + std::to_string(k) + "]"; })},
       {"group_combine", combine},
       {"out_index", spec.to_partials ? "o * splits + split" : "o"},
       {"out_value",
        spec.to_partials ? std::string("acc") : "kd::cast<" + std::string(device_type_name(spec.out)) + ">(acc)"}});
}

/// The array inputs the nodes in `need` read (their indices k into `inputs`).
std::vector<int> needed_inputs(const FusionGraph& g, const std::vector<int>& inputs, const std::vector<bool>& need) {
  std::vector<int> ks;
  for (size_t k = 0; k < inputs.size(); ++k)
    for (size_t id = 0; id < g.nodes.size(); ++id)
      if (need[id] && g.nodes[id].kind == FusionNodeKind::Argument && g.nodes[id].argument == inputs[k]) {
        ks.push_back(static_cast<int>(k));
        break;
      }
  return ks;
}

std::string rows_kernel(const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                        const std::string& name) {
  const int kn = spec.kept_ndim, rn = spec.reduced_ndim, ni = static_cast<int>(inputs.size());
  const int no = static_cast<int>(g.outputs.size()), operands = ni + no, G = spec.group;
  const int scalars = (kn + rn) * (1 + operands);
  const int V = spec.vector_width;
  const std::string vs = std::to_string(V);
  auto acc_dtype = [&](const FusionNode& n) {
    const ReduceOp op = fusion_reduce_op(n.reduction);
    const DType out = n.reduction == ReduceOp::Mean ? DType::Float64 : n.dtype;
    return reduce_accumulator_dtype(op, g.nodes[static_cast<size_t>(n.inputs[0])].dtype, out);
  };
  std::string warp_accs;
  if (G == kBlockSize)
    for (int rid : g.reductions)
      warp_accs += "  __shared__ " + std::string(device_type_name(acc_dtype(g.nodes[static_cast<size_t>(rid)]))) +
                   " wa" + std::to_string(rid) + "[" + std::to_string(kBlockSize / 32) + "];\n";
  // Vectors (V > 1): input k is read as V adjacent elements unless it is constant along the row (broadcast_mask).
  auto in_vectors = [&](int k) { return V > 1 && ((spec.broadcast_mask >> k) & 1u) == 0; };
  std::string unions;
  for (int k = 0; k < ni; ++k)
    if (in_vectors(k)) {
      const DType t = fusion_input_dtype(g, inputs, static_cast<size_t>(k));
      unions += "  union VecIn" + std::to_string(k) + " { " + raw_type(V * static_cast<int>(itemsize(t))) + " raw; " +
                device_type_name(t) + " e[" + vs + "]; };\n";
    }
  auto vector_loads = [&](const std::vector<bool>& need, const std::string& in) {
    std::string s;
    for (int k : needed_inputs(g, inputs, need))
      if (in_vectors(k)) {
        const std::string i = std::to_string(k);
        const DType t = fusion_input_dtype(g, inputs, static_cast<size_t>(k));
        s += in + "VecIn" + i + " x" + i + ";\n" + in + "x" + i + ".raw = *reinterpret_cast<const " +
             raw_type(V * static_cast<int>(itemsize(t))) + "*>(in" + i + " + o" + i + ");\n";
      }
    return s;
  };
  const FusionArgument read_element = [&](size_t k) {
    const std::string i = std::to_string(k);
    return in_vectors(static_cast<int>(k)) ? "x" + i + ".e[j]" : "in" + i + "[o" + i + "]";
  };
  const std::string element_loop = V > 1 ? "#pragma unroll\n        for (int j = 0; j < " + vs + "; ++j)" : "";
  const std::string first = V > 1 ? "lane * " + vs : "lane", step = std::to_string(G * V);
  std::string kept, passes;
  emit_kept_offsets(kept, operands, kn, rn);
  std::vector<int> all_inputs;
  for (int k = 0; k < ni; ++k) all_inputs.push_back(k);
  std::vector<bool> have(g.nodes.size(), false);
  auto read_at = [](const char* prefix) -> FusionArgument {
    return [prefix](size_t k) { return "in" + std::to_string(k) + "[" + prefix + std::to_string(k) + "]"; };
  };
  for (int rid : g.reductions) {  // one pass per reduction
    const FusionNode& n = g.nodes[static_cast<size_t>(rid)];
    const ReduceOp op = fusion_reduce_op(n.reduction);
    const DType acc = acc_dtype(n);
    std::string reduced, nodes, combine;
    emit_reduced_offsets(reduced, all_inputs, kn, rn, "        ");
    const std::vector<bool> need = fusion_needed_nodes(g, {n.inputs[0]}, have);
    emit_fusion_nodes(nodes, g, inputs, need, have, "          ", V > 1 ? read_element : read_at("o"));
    emit_group_combine(combine, G);
    const std::string type = device_type_name(n.dtype);
    passes += fill_template(
        "fusion_rows_reduction.cuh.in", kernel_sources::fusion_rows_reduction_cuh_in,
        {{"node", std::to_string(rid)},
         {"node_type", type},
         {"result", v(rid)},
         {"acc_type", device_type_name(acc)},
         {"operator_type", reduce_operator_type(op, acc)},
         {"warp_acc", G == kBlockSize ? "      ACC* warp_acc = wa" + std::to_string(rid) + ";" : ""},
         {"unroll", V > 1 ? "2" : "4"},
         {"first", first},
         {"step", step},
         {"reduced_offsets", reduced},
         {"vector_loads", vector_loads(need, "        ")},
         {"element_loop", element_loop},
         {"nodes", nodes},
         {"load", reduce_load_expression(op, device_type_name(acc), v(n.inputs[0]))},
         {"group_combine", combine},
         // With the whole block as the group, the combined value reached warp 0: share it with the block.
         {"share", G == kBlockSize ? "      if (threadIdx.x == 0) warp_acc[0] = acc;\n      __syncthreads();\n"
                                     "      acc = warp_acc[0];\n      __syncthreads();"
                                   : ""},
         {"finish", n.reduction == ReduceOp::Mean ? "kd::cast<" + type + ">((double)acc / (double)num_red)"
                                                  : "kd::cast<" + type + ">(acc)"}});
    have[static_cast<size_t>(rid)] = true;
  }
  std::vector<int> full, kept_outputs, full_operands = all_inputs;
  for (int k = 0; k < no; ++k) {
    ((spec.kept_mask >> k) & 1u ? kept_outputs : full).push_back(k);
    if (!((spec.kept_mask >> k) & 1u)) full_operands.push_back(ni + k);
  }
  auto targets = [&](const std::vector<int>& ks) {
    std::vector<int> t;
    for (int k : ks) t.push_back(g.outputs[static_cast<size_t>(k)]);
    return t;
  };
  if (!full.empty()) {  // the full-shape outputs: one more pass
    passes += "    for (IDX r = " + first + "; r < num_red; r += " + step + ") {\n";
    emit_reduced_offsets(passes, full_operands, kn, rn, "      ");
    const std::vector<bool> need = fusion_needed_nodes(g, targets(full), have);
    if (V == 1) {
      emit_fusion_nodes(passes, g, inputs, need, have, "      ", read_at("o"));
      for (int k : full)
        passes += "      out" + std::to_string(k) + "[o" + std::to_string(ni + k) +
                  "] = " + v(g.outputs[static_cast<size_t>(k)]) + ";\n";
    } else {
      passes += vector_loads(need, "      ");
      for (int k : full) {
        const std::string i = std::to_string(k);
        const std::string raw = raw_type(V * static_cast<int>(itemsize(g.nodes[static_cast<size_t>(g.outputs[k])].dtype)));
        unions += "  union VecOut" + i + " { " + raw + " raw; " + output_type(g, static_cast<size_t>(k)) + " e[" + vs +
                  "]; };\n";
        passes += "      VecOut" + i + " y" + i + ";\n";
      }
      passes += "#pragma unroll\n      for (int j = 0; j < " + vs + "; ++j) {\n";
      emit_fusion_nodes(passes, g, inputs, need, have, "        ", read_element);
      for (int k : full)
        passes += "        y" + std::to_string(k) + ".e[j] = " + v(g.outputs[static_cast<size_t>(k)]) + ";\n";
      passes += "      }\n";
      for (int k : full) {
        const std::string i = std::to_string(k);
        const std::string raw = raw_type(V * static_cast<int>(itemsize(g.nodes[static_cast<size_t>(g.outputs[k])].dtype)));
        passes += "      *reinterpret_cast<" + raw + "*>(out" + i + " + o" + std::to_string(ni + k) + ") = y" + i +
                  ".raw;\n";
      }
    }
    passes += "    }\n";
  }
  if (!kept_outputs.empty()) {  // the reduced-shape outputs: constant along the row, so read at its start
    passes += "    if (lane == 0) {\n";
    emit_fusion_nodes(passes, g, inputs, fusion_needed_nodes(g, targets(kept_outputs), have), have, "      ",
                      read_at("k"));
    for (int k : kept_outputs)
      passes += "      out" + std::to_string(k) + "[k" + std::to_string(ni + k) +
                "] = " + v(g.outputs[static_cast<size_t>(k)]) + ";\n";
    passes += "    }\n";
  }
  return fill_template("fusion_rows.cuh.in", kernel_sources::fusion_rows_cuh_in,
                       {{"name", name},
                        {"index_type", index_type(spec.index64)},
                        {"offset_type", offset_type(spec.index64)},
                        {"param_words", std::to_string(scalars + 2)},
                        {"block_size", std::to_string(kBlockSize)},
                        {"parameters", parameters(g, inputs, output_types(g), spec.aliased)},
                        {"scalars", std::to_string(scalars)},
                        {"group", std::to_string(G)},
                        {"warp_accs", warp_accs},
                        {"vector_unions", unions},
                        {"groups", std::to_string(kBlockSize / G)},
                        {"kept_offsets", kept},
                        {"passes", passes}});
}

/// A multi-tensor kernel: block b updates chunk l.chunk[b] of tensor l.tensor[b] (see MultiTensorTable).
std::string multi_tensor_kernel(const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                                const std::string& name) {
  const size_t no = g.outputs.size();
  const MultiTensorTable t = multi_tensor_table(static_cast<int>(no + inputs.size()), static_cast<int>(g.slots.size()));
  std::string slot_parameters, pointers;
  for (size_t j = 0; j < g.slots.size(); ++j)
    slot_parameters += ", const " + std::string(device_type_name(g.slots[j].argument_dtype)) + " s" + std::to_string(j);
  for (size_t k = 0; k < no; ++k)
    pointers += "  " + output_type(g, k) + "* out" + std::to_string(k) + " = (" + output_type(g, k) + "*)l.ptr[" +
                std::to_string(k) + "][t] + start;\n";
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::string type = device_type_name(fusion_input_dtype(g, inputs, k));
    const bool one = (spec.broadcast_mask >> k) & 1u;  // one element for the whole tensor
    pointers += "  const " + type + "* in" + std::to_string(k) + " = (const " + type + "*)l.ptr[" +
                std::to_string(no + k) + "][t]" + (one ? "" : " + start") + ";\n";
  }
  return fill_template(
      "fusion_multi_tensor.cuh.in", kernel_sources::fusion_multi_tensor_cuh_in,
      {{"name", name},
       {"element_function", element_function(g, inputs)},
       {"operands", std::to_string(t.operands)},
       {"tensors", std::to_string(t.tensors)},
       {"table_bytes", std::to_string(t.bytes)},
       {"block_size", std::to_string(kBlockSize)},
       {"slot_parameters", slot_parameters},
       {"chunk", std::to_string(kMultiTensorChunk)},
       {"pointers", pointers},
       {"element_call", element_call(
                            g, no, inputs.size(), [](size_t k) { return "out" + std::to_string(k) + "[i]"; },
                            [&](size_t k) {
                              return "in" + std::to_string(k) + ((spec.broadcast_mask >> k) & 1u ? "[0]" : "[i]");
                            })}});
}

}  // namespace

MultiTensorTable multi_tensor_table(int operands, int slots) {
  // The slots follow the table among the kernel's parameters, each at most 8 bytes.
  const int64_t budget = 4096 - 8 * int64_t{slots} - 16;
  MultiTensorTable t;
  t.operands = operands;
  const int64_t per_tensor = 8 * (int64_t{operands} + 1) + 4;
  t.tensors = static_cast<int>(std::min<int64_t>(255, budget / per_tensor));
  if (t.tensors < 1)
    throw ValueError("fuse: " + std::to_string(operands) + " arrays and " + std::to_string(slots) +
                     " scalar slots leave no room for a multi-tensor table in 4 KB of kernel parameters; split the "
                     "function");
  const size_t tensors = static_cast<size_t>(t.tensors);
  t.pointers = 0;
  t.sizes = t.pointers + static_cast<size_t>(operands) * tensors * sizeof(void*);
  t.first = t.sizes + tensors * sizeof(long long);
  t.bytes = (t.first + tensors * sizeof(int32_t) + 7) / 8 * 8;
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
    case FusionLayout::Broadcast:
      name += "_bcast" + std::to_string(spec.ndim) + "_v" + std::to_string(spec.vector_width) + "_b" +
              std::to_string(spec.broadcast_mask);
      break;
    case FusionLayout::Rows:
      name += "_rows_g" + std::to_string(spec.group) + "_k" + std::to_string(spec.kept_ndim) + "_r" +
              std::to_string(spec.reduced_ndim) + "_m" + std::to_string(spec.kept_mask);
      if (spec.vector_width > 1)
        name += "_v" + std::to_string(spec.vector_width) + "_b" + std::to_string(spec.broadcast_mask);
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
  switch (spec.layout) {
    case FusionLayout::Contiguous:
      return contiguous_kernel(g, inputs, spec, name);
    case FusionLayout::Strided:
      return strided_kernel(g, inputs, spec, name);
    case FusionLayout::Broadcast:
      return broadcast_kernel(g, inputs, spec, name);
    case FusionLayout::Reduce:
      return reduce_kernel(g, inputs, spec, name);
    case FusionLayout::Rows:
      return rows_kernel(g, inputs, spec, name);
    case FusionLayout::MultiTensor:
      return multi_tensor_kernel(g, inputs, spec, name);
  }
  throw ValueError("fuse codegen: unknown layout for " + name);
}

std::string fusion_source(const FusionGraph& g, const FusionKernelSpec& spec) {
  return device_prelude() + fusion_kernel_code(g, spec);
}

}  // namespace kiln::cuda_impl
