// Source generation for fused kernels (see fusion.hpp for the loops and the
// argument layout). The element function reuses the prelude's op_<name> and
// cast<> of the built-in kernels, so fused code computes exactly what the
// unfused kernels compute, value for value.
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

/// `__device__ E element(const T0 a0, ..., const S0 s0, ...)`: the graph's elementwise part at one index.
std::string element_function(const FusionGraph& g, const std::vector<int>& inputs) {
  const FusionNode& result = g.nodes[static_cast<size_t>(g.elementwise)];
  std::string s = "__device__ __forceinline__ " + std::string(device_type_name(result.dtype)) + " element(";
  bool first = true;
  for (size_t k = 0; k < inputs.size(); ++k) {
    s += (first ? "const " : ", const ") + std::string(device_type_name(input_dtype(g, inputs, k))) + " a" +
         std::to_string(k);
    first = false;
  }
  for (size_t j = 0; j < g.slots.size(); ++j) {
    s += (first ? "const " : ", const ") + std::string(device_type_name(g.slots[j].argument_dtype)) + " s" +
         std::to_string(j);
    first = false;
  }
  s += ") {\n";
  for (int id = 0; id <= g.elementwise; ++id) {
    const FusionNode& n = g.nodes[static_cast<size_t>(id)];
    if (n.weak || !g.live[static_cast<size_t>(id)]) continue;
    const std::string type = device_type_name(n.dtype);
    s += "  const " + type + " " + v(id) + " = ";
    switch (n.kind) {
      case FusionNodeKind::Argument: {
        size_t k = 0;
        while (inputs[k] != n.argument) ++k;
        s += "a" + std::to_string(k);
        break;
      }
      case FusionNodeKind::Cast:
        s += "kd::cast<" + type + ">(" + (n.slots[0] >= 0 ? "s" + std::to_string(n.slots[0]) : v(n.inputs[0])) + ")";
        break;
      case FusionNodeKind::Op: {
        const DType c = kernel_compute_dtype(n.compute);
        if (!elementwise_op_supported(n.op, c))
          throw DTypeError(std::string("fuse(") + g.name + "): " + detail::op_info(n.op).name +
                           " has no GPU kernel for compute dtype " + std::string(dtype_name(n.compute)));
        s += "kd::cast<" + type + ">(kd::op_" + detail::op_info(n.op).name + "<" + device_type_name(c) + ">(";
        for (int k = 0; k < n.num_inputs; ++k) {
          s += k ? ", " : "";
          if (n.slots[k] >= 0) {
            s += "s" + std::to_string(n.slots[k]);  // already of the op's (kernel) compute type, or bool
          } else {
            const bool condition = n.op == OpCode::Where && k == 0;
            s += "kd::cast<" + std::string(condition ? "bool" : device_type_name(c)) + ">(" + v(n.inputs[k]) + ")";
          }
        }
        s += "))";
        break;
      }
      default:
        throw ValueError("fuse codegen: unexpected node kind in the elementwise part");
    }
    s += ";\n";
  }
  return s + "  return " + v(g.elementwise) + ";\n}\n";
}

/// Parameter list: out, inputs, slots, then `extra`.
std::string parameters(const FusionGraph& g, const std::vector<int>& inputs, const std::string& out_type,
                       const std::string& extra) {
  std::string s = out_type + "* __restrict__ out";
  for (size_t k = 0; k < inputs.size(); ++k)
    s +=
        ", const " + std::string(device_type_name(input_dtype(g, inputs, k))) + "* __restrict__ in" + std::to_string(k);
  for (size_t j = 0; j < g.slots.size(); ++j)
    s += ", const " + std::string(device_type_name(g.slots[j].argument_dtype)) + " s" + std::to_string(j);
  return s + extra;
}

/// "element(x0, ..., s0, ...)" with input k read as `read(k)`.
template <class R>
std::string element_call(const FusionGraph& g, size_t num_inputs, R read) {
  std::string s = "element(";
  bool first = true;
  for (size_t k = 0; k < num_inputs; ++k) {
    s += (first ? "" : ", ") + read(k);
    first = false;
  }
  for (size_t j = 0; j < g.slots.size(); ++j) {
    s += (first ? "s" : ", s") + std::to_string(j);
    first = false;
  }
  return s + ")";
}

void contiguous_kernel(std::string& s, const FusionGraph& g, const std::vector<int>& inputs,
                       const FusionKernelSpec& spec, const std::string& name) {
  const DType out = g.nodes[static_cast<size_t>(g.elementwise)].dtype;
  const std::string out_type = device_type_name(out);
  s += spec.index64 ? "typedef unsigned long long IDX;\n" : "typedef unsigned int IDX;\n";
  const int vec = spec.vector_width;
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameters(g, inputs, out_type, ", const IDX n") + ") {\n";
  s += "  const IDX step = (IDX)gridDim.x * blockDim.x;\n";
  s += "  const IDX first = (IDX)blockIdx.x * blockDim.x + threadIdx.x;\n";
  std::string tail_start = "first";
  if (vec > 1) {
    // Several 16-byte loads per input in flight per thread (as the built-in contiguous kernel).
    const int unroll = contiguous_unroll(static_cast<int>(inputs.size()));
    const std::string vs = std::to_string(vec), u = std::to_string(unroll);
    const std::string out_raw = raw_type(vec * static_cast<int>(itemsize(out)));
    s += "  union VecOut { " + out_raw + " raw; " + out_type + " e[" + vs + "]; };\n";
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
    s += "      VecOut o;\n#pragma unroll\n      for (int j = 0; j < " + vs + "; ++j) o.e[j] = " +
         element_call(g, inputs.size(), [](size_t k) { return "x" + std::to_string(k) + "[u].e[j]"; }) + ";\n";
    s += "      reinterpret_cast<" + out_raw + "*>(out)[v + u * step] = o.raw;\n    }\n  }\n";
    tail_start = "vectors * " + vs + " + first";
  }
  s += "  for (IDX i = " + tail_start + "; i < n; i += step) out[i] = " +
       element_call(g, inputs.size(), [](size_t k) { return "in" + std::to_string(k) + "[i]"; }) + ";\n}\n";
}

void strided_kernel(std::string& s, const FusionGraph& g, const std::vector<int>& inputs, const FusionKernelSpec& spec,
                    const std::string& name) {
  const int nd = spec.ndim;
  const int operands = 1 + static_cast<int>(inputs.size());
  const int stride_base = spec.index64 ? nd : 3 * nd;
  const std::string out_type = device_type_name(g.nodes[static_cast<size_t>(g.elementwise)].dtype);
  s += spec.index64 ? "typedef unsigned long long IDX;\ntypedef long long OFF;\n"
                    : "typedef unsigned int IDX;\ntypedef int OFF;\n";
  s += "struct Params { IDX w[" + std::to_string(stride_base + operands * nd) + "]; };\n";
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameters(g, inputs, out_type, ", const Params p, const IDX n") + ") {\n";
  const std::string u = std::to_string(spec.unroll);
  s += "  const IDX step = (IDX)gridDim.x * blockDim.x;\n";
  s += "  for (IDX base = (IDX)blockIdx.x * blockDim.x + threadIdx.x; base < n; base += " + u + " * step) {\n";
  s += "    OFF out_off[" + u + "];\n";
  for (size_t k = 0; k < inputs.size(); ++k)
    s +=
        "    " + std::string(device_type_name(input_dtype(g, inputs, k))) + " x" + std::to_string(k) + "[" + u + "];\n";
  s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u) {\n";
  s += "      const IDX i = base + u * step;\n      if (i >= n) break;\n";
  emit_strided_offsets(s, nd, operands, spec.index64, "      ");
  s += "      out_off[u] = o0;\n";
  for (size_t k = 0; k < inputs.size(); ++k)
    s += "      x" + std::to_string(k) + "[u] = in" + std::to_string(k) + "[o" + std::to_string(k + 1) + "];\n";
  s += "    }\n";
  s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u) {\n      if (base + u * step >= n) break;\n";
  s += "      out[out_off[u]] = " +
       element_call(g, inputs.size(), [](size_t k) { return "x" + std::to_string(k) + "[u]"; }) + ";\n    }\n  }\n}\n";
}

std::string reduce_operator(const FusionKernelSpec& spec) {
  if (spec.op == ReduceOp::ArgMax || spec.op == ReduceOp::ArgMin)
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
  const int per_input = kn + rn, input_base = kn + rn, scalars = input_base + ni * per_input;
  s += "struct Params { IDX w[" + std::to_string(scalars + 4) + "]; };\n";
  s += "__device__ __forceinline__ ACC load(" + elem + " x) { return " +
       (spec.op == ReduceOp::All || spec.op == ReduceOp::Any ? std::string("kd::widen(x) != 0")
                                                             : std::string("(ACC)kd::widen(x)")) +
       "; }\n";
  const std::string out_type = spec.to_partials ? acc : device_type_name(spec.out);
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameters(g, inputs, out_type, ", const Params p") + ") {\n";
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
  for (int k = 0; k < ni; ++k) s += "    OFF k" + std::to_string(k) + " = 0;\n";
  if (kn > 0) {
    s += "    {\n      IDX rem = o;\n";
    s += "#pragma unroll\n      for (int d = " + std::to_string(kn - 1) + "; d >= 0; --d) {\n";
    s += "        const IDX q = d > 0 ? rem / p.w[d] : 0;\n        const OFF r = (OFF)(rem - q * p.w[d]);\n";
    s += "        rem = q;\n";
    for (int k = 0; k < ni; ++k)
      s += "        k" + std::to_string(k) + " += r * (OFF)p.w[" + std::to_string(input_base + k * per_input) +
           " + d];\n";
    s += "      }\n    }\n";
  }
  s += "    const IDX r0 = split * chunk;\n    const IDX r1 = r0 + chunk < num_red ? r0 + chunk : num_red;\n";
  s += "    ACC acc = Op::identity();\n";
  s += "#pragma unroll 4\n    for (IDX r = r0 + lane; r < r1; r += " + std::to_string(G) + ") {\n";
  for (int k = 0; k < ni; ++k) s += "      OFF o" + std::to_string(k) + " = k" + std::to_string(k) + ";\n";
  s += "      {\n        IDX rem = r;\n";
  s += "#pragma unroll\n        for (int d = " + std::to_string(rn - 1) + "; d >= 0; --d) {\n";
  s += "          const IDX q = d > 0 ? rem / p.w[" + std::to_string(kn) + " + d] : 0;\n";
  s += "          const OFF rr = (OFF)(rem - q * p.w[" + std::to_string(kn) + " + d]);\n          rem = q;\n";
  for (int k = 0; k < ni; ++k)
    s += "          o" + std::to_string(k) + " += rr * (OFF)p.w[" + std::to_string(input_base + k * per_input + kn) +
         " + d];\n";
  s += "        }\n      }\n";
  s += "      acc = Op::combine(acc, load(" +
       element_call(g, inputs.size(),
                    [](size_t k) { return "in" + std::to_string(k) + "[o" + std::to_string(k) + "]"; }) +
       "));\n    }\n";
  emit_group_combine(s, G);
  s += "    if (lane == 0) out[" + std::string(spec.to_partials ? "o * splits + split" : "o") + "] = " +
       (spec.to_partials ? std::string("acc") : "kd::cast<" + std::string(device_type_name(spec.out)) + ">(acc)") +
       ";\n  }\n}\n";
}

}  // namespace

std::vector<int> fusion_array_arguments(const FusionGraph& g) {
  std::vector<int> inputs;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const FusionNode& n = g.nodes[i];
    if (n.kind == FusionNodeKind::Argument && !n.weak && g.live[i]) inputs.push_back(n.argument);
  }
  return inputs;
}

ReduceOp fusion_reduce_op(detail::FusionReduction r) {
  switch (r) {
    case detail::FusionReduction::Prod:
      return ReduceOp::Prod;
    case detail::FusionReduction::Max:
      return ReduceOp::Max;
    case detail::FusionReduction::Min:
      return ReduceOp::Min;
    case detail::FusionReduction::All:
      return ReduceOp::All;
    case detail::FusionReduction::Any:
      return ReduceOp::Any;
    default:
      return ReduceOp::Sum;  // sum, and mean (a float64 sum the core divides)
  }
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
    case FusionLayout::Reduce:
      name += std::string("_") + detail::reduce_op_name(spec.op) + "_a" + dtype_tag(spec.acc) + "_" +
              (spec.to_partials ? std::string("partial") : dtype_tag(spec.out)) + "_g" + std::to_string(spec.group) +
              "_k" + std::to_string(spec.kept_ndim) + "_r" + std::to_string(spec.reduced_ndim);
      break;
  }
  return name + (spec.index64 ? "_i64" : "_i32");
}

std::string fusion_kernel_code(const FusionGraph& g, const FusionKernelSpec& spec) {
  const std::string name = fusion_kernel_name(g, spec);
  const std::vector<int> inputs = fusion_array_arguments(g);
  if (static_cast<int>(inputs.size()) + 1 > kMaxLayoutOperands)
    throw ValueError("fuse(" + g.name + "): " + std::to_string(inputs.size()) +
                     " array arguments; a fused kernel takes at most " + std::to_string(kMaxLayoutOperands - 1) +
                     ", so split the function");
  const int v = spec.vector_width;
  if (v < 1 || v > 16 || (v & (v - 1)) != 0) throw ValueError("fuse codegen: bad vector width " + std::to_string(v));
  if (spec.layout != FusionLayout::Contiguous && (spec.ndim < 1 || spec.ndim > kMaxKernelRank))
    throw ValueError("fuse codegen: rank " + std::to_string(spec.ndim) + " is outside 1.." +
                     std::to_string(kMaxKernelRank));
  if (spec.layout == FusionLayout::Reduce &&
      (spec.kept_ndim < 0 || spec.kept_ndim > kMaxKernelRank || spec.reduced_ndim < 1 ||
       spec.reduced_ndim > kMaxKernelRank ||
       !(spec.group == kBlockSize || (spec.group >= 1 && spec.group <= 32 && (spec.group & (spec.group - 1)) == 0))))
    throw ValueError("fuse codegen: bad reduction spec for " + name);
  std::string s = "// " + name + " (generated by kiln::fuse)\nnamespace " + name + "_ns {\n";
  s.reserve(8192);
  s += element_function(g, inputs);
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
  }
  return s + "}  // namespace\n";
}

std::string fusion_source(const FusionGraph& g, const FusionKernelSpec& spec) {
  return device_prelude() + fusion_kernel_code(g, spec);
}

}  // namespace kiln::cuda_impl
