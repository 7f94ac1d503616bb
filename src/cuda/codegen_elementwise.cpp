// Source generation for elementwise kernels and the table of
// compiled built-in kernels (see codegen.hpp for the argument layouts).
//
// Every generated kernel is one `element()` function — inputs converted to the
// compute type, the op from the prelude, the result converted to the output's
// storage type — wrapped in one of four loops, each a template of src/cuda/kernels
// (elementwise_<loop>.cuh.in) filled by fill_template:
// - contiguous: a grid-stride loop over vectors of `vector_width` elements
//   (16 bytes of the widest operand, loaded through a union with uint4/uint2/...),
//   then a scalar loop over the tail;
// - strided: a grid-stride loop over output elements whose per-operand offsets
//   come from the coalesced shape (division by invariant integers in 32-bit mode);
// - tiled: an input transposed relative to the output staged through 32 x 32
//   shared-memory tiles, so both its reads and the output's writes are coalesced;
// - sequence: arange/linspace values computed from the index in double.
#include <cstdio>
#include <string>

#include "cuda/codegen.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/template.hpp"
#include "kernel_sources/elementwise_contiguous.cuh.in.hpp"
#include "kernel_sources/elementwise_contiguous_vectors.cuh.in.hpp"
#include "kernel_sources/elementwise_sequence.cuh.in.hpp"
#include "kernel_sources/elementwise_strided.cuh.in.hpp"
#include "kernel_sources/elementwise_tiled.cuh.in.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {

using detail::OpCode;

// The op list's one dtype rule, shared with the CPU backend (so the two cannot disagree), complex included.
bool elementwise_op_supported(OpCode op, DType t) { return detail::op_supports(op, t); }

namespace {

std::string input_type(const ElementwiseSpec& spec, int k) { return device_type_name(spec.in[k]); }

/// `__device__ OUT element(IN0 x0, ...)`: one output value from one value of each input.
std::string element_function(const ElementwiseSpec& spec) {
  const std::string out = device_type_name(spec.out);
  const std::string c = device_type_name(kernel_compute_dtype(spec.compute));
  std::string s = "__device__ __forceinline__ " + out + " element(";
  for (int k = 0; k < spec.num_inputs; ++k) s += (k ? ", " : "") + input_type(spec, k) + " x" + std::to_string(k);
  s += ") {\n  return ";
  if (spec.raw_copy) return s + "x0;\n}\n";
  // A cast converts straight to the output type (kd::cast: double -> half/bfloat16 rounds once, through
  // round-to-odd), never through the compute type, which would round twice (float64 -> float32 -> float16).
  if (spec.op == OpCode::Identity) return s + "kd::cast<" + out + ">(x0);\n}\n";
  // gelu_tanh into float16/bfloat16 (GPT-2's activation under autocast): the same bits as the double formula
  // below, from float arithmetic wherever float's error bound decides the rounding (kd::ops::gelu_tanh_narrow).
  if (spec.op == OpCode::GeluTanh && (spec.out == DType::Float16 || spec.out == DType::BFloat16) &&
      spec.compute == spec.out)
    return s + "kd::ops::gelu_tanh_narrow<" + out + ">(kd::cast<float>(x0));\n}\n";
  const std::string name = detail::op_info(spec.op).name;
  s += "kd::cast<" + out + ">(kd::op_" + name + "<" + c + ">(";
  for (int k = 0; k < spec.num_inputs; ++k) {
    const bool condition = spec.op == OpCode::Where && k == 0;
    s += (k ? ", " : "") + std::string("kd::cast<") + (condition ? "bool" : c) + ">(x" + std::to_string(k) + ")";
  }
  return s + "));\n}\n";
}

/// The kernel's parameter list: the output, then each input's pointer or scalar.
std::string parameter_list(const ElementwiseSpec& spec) {
  std::string s = device_type_name(spec.out) + std::string("* __restrict__ out");
  for (int k = 0; k < spec.num_inputs; ++k) {
    const std::string index = std::to_string(k);
    if (spec.scalar[k])
      s += ", const " + input_type(spec, k) + " s" + index;
    else
      s += ", const " + input_type(spec, k) + "* __restrict__ in" + index;
  }
  return s;
}

/// `element(...)` applied to input values read at index i; scalars are the arguments.
std::string element_call_at_i(const ElementwiseSpec& spec) {
  std::string s = "element(";
  for (int k = 0; k < spec.num_inputs; ++k) {
    const std::string i = std::to_string(k);
    s += (k ? ", " : "") + (spec.scalar[k] ? "s" + i : "in" + i + "[i]");
  }
  return s + ")";
}

std::string index_type(bool index64) { return index64 ? "unsigned long long" : "unsigned int"; }
std::string offset_type(bool index64) { return index64 ? "long long" : "int"; }

std::string contiguous_kernel(const ElementwiseSpec& spec, const std::string& name) {
  const int vec = spec.vector_width;
  std::string unions, loop, tail_start = "first";
  if (vec > 1) {
    unions = "union VecOut { " + std::string(raw_type(vec * static_cast<int>(itemsize(spec.out)))) + " raw; " +
             device_type_name(spec.out) + " e[" + std::to_string(vec) + "]; };\n";
    for (int k = 0; k < spec.num_inputs; ++k) {
      if (spec.scalar[k]) continue;
      unions += "union VecIn" + std::to_string(k) + " { " + raw_type(vec * static_cast<int>(itemsize(spec.in[k]))) +
                " raw; " + input_type(spec, k) + " e[" + std::to_string(vec) + "]; };\n";
    }
    int array_inputs = 0;
    for (int k = 0; k < spec.num_inputs; ++k) array_inputs += spec.scalar[k] ? 0 : 1;
    const std::string v = std::to_string(vec), u = std::to_string(contiguous_unroll(array_inputs));
    std::string loads, call = "element(";
    for (int k = 0; k < spec.num_inputs; ++k) {
      const std::string i = std::to_string(k);
      call += k ? ", " : "";
      if (spec.scalar[k]) {
        call += "s" + i;
      } else {
        loads += "    VecIn" + i + " a" + i + "[" + u + "];\n";
        loads += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u)\n      if (v + u * step < vectors) a" + i +
                 "[u].raw = reinterpret_cast<const " + raw_type(vec * static_cast<int>(itemsize(spec.in[k]))) +
                 "*>(in" + i + ")[v + u * step];\n";
        call += "a" + i + "[u].e[j]";
      }
    }
    loop = fill_template("elementwise_contiguous_vectors.cuh.in", kernel_sources::elementwise_contiguous_vectors_cuh_in,
                         {{"width", v},
                          {"unroll", u},
                          {"loads", loads},
                          {"element_call", call + ")"},
                          {"out_raw", raw_type(vec * static_cast<int>(itemsize(spec.out)))}});
    tail_start = "vectors * " + v + " + first";
  }
  return fill_template("elementwise_contiguous.cuh.in", kernel_sources::elementwise_contiguous_cuh_in,
                       {{"name", name},
                        {"element_function", element_function(spec)},
                        {"index_type", index_type(spec.index64)},
                        {"vector_unions", unions},
                        {"block_size", std::to_string(kBlockSize)},
                        {"parameters", parameter_list(spec)},
                        {"vector_loop", loop},
                        {"tail_start", tail_start},
                        {"element_call", element_call_at_i(spec)}});
}

}  // namespace

void emit_strided_offsets(std::string& s, int ndim, int operands, bool index64, const std::string& indent,
                          const StridedNames& names) {
  const int nd = ndim;
  const int stride_base = index64 ? nd : 3 * nd;
  const std::string p = std::string(names.params) + ".w[", rem = names.rem, o = names.offset, in = indent;
  const std::string idx = names.idx, off = names.off;
  s += in + idx + " " + rem + " = " + names.index + ";\n" + in + off;
  for (int k = 0; k < operands; ++k) s += (k ? ", " : " ") + o + std::to_string(k) + " = 0";
  s += ";\n";
  const std::string ndim_str = std::to_string(nd);
  if (nd > 1) {
    s += "#pragma unroll\n" + in + "for (int d = " + std::to_string(nd - 1) + "; d >= 1; --d) {\n";
    if (index64)
      s += in + "  const " + idx + " q = " + rem + " / " + p + "d];\n";
    else
      s += in + "  const " + idx + " q = (__umulhi(" + rem + ", " + p + ndim_str + " + d]) + " + rem + ") >> " + p +
           std::to_string(2 * nd) + " + d];\n";
    s += in + "  const " + off + " r = (" + off + ")(" + rem + " - q * " + p + "d]);\n" + in + "  " + rem + " = q;\n";
    for (int k = 0; k < operands; ++k)
      s += in + "  " + o + std::to_string(k) + " += r * (" + off + ")" + p + std::to_string(stride_base + k * nd) +
           " + d];\n";
    s += in + "}\n";
  }
  for (int k = 0; k < operands; ++k)
    s += in + o + std::to_string(k) + " += (" + off + ")" + rem + " * (" + off + ")" + p +
         std::to_string(stride_base + k * nd) + "];\n";
}

namespace {

std::string strided_kernel(const ElementwiseSpec& spec, const std::string& name) {
  const int nd = spec.ndim;
  int operands = 1;
  for (int k = 0; k < spec.num_inputs; ++k) operands += spec.scalar[k] ? 0 : 1;
  const int stride_base = spec.index64 ? nd : 3 * nd;
  const std::string u = std::to_string(spec.unroll);
  const int vec = spec.vector_width;  // > 1: the vector variant (see elementwise_strided.cuh.in)
  const std::string w = std::to_string(vec);
  const auto raw_of = [&](DType t) { return std::string(raw_type(vec * static_cast<int>(itemsize(t)))); };
  std::string unions, arrays, offsets, loads, call = "element(";
  if (vec > 1)
    unions = "union VecOut { " + raw_of(spec.out) + " raw; " + device_type_name(spec.out) + " e[" + w + "]; };\n";
  for (int k = 0; k < spec.num_inputs; ++k) {
    if (spec.scalar[k]) continue;
    const std::string i = std::to_string(k);
    if (vec > 1) {
      unions += "union VecIn" + i + " { " + raw_of(spec.in[k]) + " raw; " + input_type(spec, k) + " e[" + w + "]; };\n";
      arrays += "    VecIn" + i + " x" + i + "[" + u + "];\n";
    } else {
      arrays += "    " + input_type(spec, k) + " x" + i + "[" + u + "];\n";
    }
  }
  emit_strided_offsets(offsets, nd, operands, spec.index64, "      ");
  int array_index = 0;
  for (int k = 0; k < spec.num_inputs; ++k) {
    const std::string i = std::to_string(k);
    call += k ? ", " : "";
    if (spec.scalar[k]) {
      call += "s" + i;
    } else if (vec > 1) {
      loads += "      x" + i + "[u].raw = reinterpret_cast<const " + raw_of(spec.in[k]) + "*>(in" + i + ")[o" +
               std::to_string(++array_index) + "];\n";
      call += "x" + i + "[u].e[j]";
    } else {
      loads += "      x" + i + "[u] = in" + i + "[o" + std::to_string(++array_index) + "];\n";
      call += "x" + i + "[u]";
    }
  }
  const std::string store =
      vec > 1 ? "      VecOut y;\n#pragma unroll\n      for (int j = 0; j < " + w + "; ++j) y.e[j] = " + call +
                    ");\n      reinterpret_cast<" + raw_of(spec.out) + "*>(out)[out_off[u]] = y.raw;"
              : "      out[out_off[u]] = " + call + ");";
  return fill_template("elementwise_strided.cuh.in", kernel_sources::elementwise_strided_cuh_in,
                       {{"name", name},
                        {"element_function", element_function(spec)},
                        {"index_type", index_type(spec.index64)},
                        {"offset_type", offset_type(spec.index64)},
                        {"param_words", std::to_string(stride_base + operands * nd)},
                        {"block_size", std::to_string(kBlockSize)},
                        {"parameters", parameter_list(spec)},
                        {"unroll", u},
                        {"vector_unions", unions},
                        {"input_arrays", arrays},
                        {"offsets", offsets},
                        {"loads", loads},
                        {"store", store}});
}

std::string tiled_kernel(const ElementwiseSpec& spec, const std::string& name) {
  const int nd = spec.ndim, batch = nd - 2;
  int operands = 1;
  for (int k = 0; k < spec.num_inputs; ++k) operands += spec.scalar[k] ? 0 : 1;
  const int sa = 5, sb = 5 + operands, bsize = 5 + 2 * operands, bstride = bsize + batch;
  const auto w = [](int i) { return "p.w[" + std::to_string(i) + "]"; };
  std::string tiles, declarations, batch_offsets, tile_loads;
  for (int k = 0; k < spec.num_inputs; ++k)
    if (spec.tiled_inputs & (1 << k))
      tiles += "  __shared__ " + input_type(spec, k) + " t" + std::to_string(k) + "[32][33];\n";
  for (int k = 0; k < operands; ++k) declarations += (k ? ", o" : "o") + std::to_string(k) + " = 0";
  for (int d = batch - 1; d >= 0; --d) {
    batch_offsets += "    {\n      const OFF r = (OFF)(q % " + w(bsize + d) + ");\n      q /= " + w(bsize + d) + ";\n";
    for (int k = 0; k < operands; ++k)
      batch_offsets += "      o" + std::to_string(k) + " += r * (OFF)" + w(bstride + k * batch + d) + ";\n";
    batch_offsets += "    }\n";
  }
  const auto at = [&](int operand) {
    const std::string k = std::to_string(operand);
    return "o" + k + " + (OFF)a * (OFF)" + w(sa + operand) + " + (OFF)b * (OFF)" + w(sb + operand);
  };
  int array_index = 0;
  for (int k = 0; k < spec.num_inputs; ++k) {
    if (spec.scalar[k]) continue;
    ++array_index;
    if (spec.tiled_inputs & (1 << k))
      tile_loads +=
          "        t" + std::to_string(k) + "[j][tx] = in" + std::to_string(k) + "[" + at(array_index) + "];\n";
  }
  std::string call = "element(";
  array_index = 0;
  for (int k = 0; k < spec.num_inputs; ++k) {
    const std::string i = std::to_string(k);
    call += k ? ", " : "";
    if (spec.scalar[k]) {
      call += "s" + i;
      continue;
    }
    ++array_index;
    call += spec.tiled_inputs & (1 << k) ? "t" + i + "[tx][j]" : "in" + i + "[" + at(array_index) + "]";
  }
  return fill_template("elementwise_tiled.cuh.in", kernel_sources::elementwise_tiled_cuh_in,
                       {{"name", name},
                        {"element_function", element_function(spec)},
                        {"index_type", index_type(spec.index64)},
                        {"offset_type", offset_type(spec.index64)},
                        {"param_words", std::to_string(bstride + operands * batch)},
                        {"block_size", std::to_string(kBlockSize)},
                        {"parameters", parameter_list(spec)},
                        {"tiles", tiles},
                        {"offset_declarations", declarations},
                        {"batch_offsets", batch_offsets},
                        {"tile_loads", tile_loads},
                        {"out_offset", at(0)},
                        {"element_call", call + ")"}});
}

std::string sequence_kernel(const ElementwiseSpec& spec, const std::string& name) {
  return fill_template(
      "elementwise_sequence.cuh.in", kernel_sources::elementwise_sequence_cuh_in,
      {{"name", name}, {"block_size", std::to_string(kBlockSize)}, {"out_type", device_type_name(spec.out)}});
}

}  // namespace

const char* device_type_name(DType t) {
  constexpr const char* names[] = {"bool",       "kd::i8",     "kd::i16", "kd::i32", "kd::i64", "kd::u8",
                                   "kd::half_t", "kd::bf16_t", "float",   "double",  "kd::c64", "kd::c128"};
  static_assert(std::size(names) == kNumDTypes, "one device type per dtype");
  return names[static_cast<int>(t)];
}

const char* dtype_tag(DType t) {
  constexpr const char* tags[] = {"b8", "i8", "i16", "i32", "i64", "u8", "f16", "bf16", "f32", "f64", "c64", "c128"};
  static_assert(std::size(tags) == kNumDTypes, "one tag per dtype");
  return tags[static_cast<int>(t)];
}

bool elementwise_vectorizable(OpCode op, DType compute) {
  const detail::OpInfo& info = detail::op_info(op);
  switch (info.gpu_vector) {
    case detail::GpuVector::Vec:  // float64 transcendental ops are compute-bound: wider loads do not help
      return !(compute == DType::Float64 && info.rule == detail::TypeRule::Float);
    case detail::GpuVector::VecInt:
      return !is_floating(compute);
    case detail::GpuVector::NoVec:
      return false;
  }
  return false;
}

DType kernel_compute_dtype(DType compute) {
  return compute == DType::Float16 || compute == DType::BFloat16 ? DType::Float32 : compute;
}

DType scalar_argument_dtype(OpCode op, int input, DType compute) {
  if (op == OpCode::Where && input == 0) return DType::Bool;
  return kernel_compute_dtype(compute);
}

std::string elementwise_kernel_name(const ElementwiseSpec& spec) {
  std::string name = "kiln_";
  if (spec.layout == EwLayout::Sequence) return name + "sequence_" + dtype_tag(spec.out);
  name += spec.raw_copy ? "copy" : detail::op_info(spec.op).name;
  for (int k = 0; k < spec.num_inputs; ++k)
    name += std::string("_") + (spec.scalar[k] ? "s" : "") + dtype_tag(spec.in[k]);
  if (!spec.raw_copy) name += std::string("_c") + dtype_tag(spec.compute);
  name += std::string("_") + dtype_tag(spec.out);
  if (spec.layout == EwLayout::Contiguous)
    name += "_contig_v" + std::to_string(spec.vector_width);
  else if (spec.layout == EwLayout::Tiled)
    name += "_tiled" + std::to_string(spec.ndim) + "_t" + std::to_string(spec.tiled_inputs);
  else
    name += "_strided" + std::to_string(spec.ndim) + (spec.unroll > 1 ? "_u" + std::to_string(spec.unroll) : "") +
            (spec.vector_width > 1 ? "_v" + std::to_string(spec.vector_width) : "");
  return name + (spec.index64 ? "_i64" : "_i32");
}

std::string elementwise_source(const ElementwiseSpec& spec) { return device_prelude() + elementwise_kernel_code(spec); }

std::string elementwise_kernel_code(const ElementwiseSpec& spec) {
  const std::string name = elementwise_kernel_name(spec);
  if (spec.layout == EwLayout::Sequence) return sequence_kernel(spec, name);
  const int arity = detail::op_info(spec.op).arity;
  if (spec.num_inputs != arity || spec.num_inputs < 1)
    throw ValueError(std::string("elementwise codegen: op ") + detail::op_info(spec.op).name + " takes " +
                     std::to_string(arity) + " inputs, the spec has " + std::to_string(spec.num_inputs));
  if (!spec.raw_copy && !elementwise_op_supported(spec.op, kernel_compute_dtype(spec.compute)))
    throw DTypeError(std::string(detail::op_info(spec.op).name) + ": no GPU kernel for compute dtype " +
                     std::string(dtype_name(spec.compute)) + " (the front-end should have promoted or rejected it)");
  if (spec.layout == EwLayout::Strided && (spec.ndim < 1 || spec.ndim > kMaxRank))
    throw ValueError("elementwise codegen: rank " + std::to_string(spec.ndim) + " is outside 1.." +
                     std::to_string(kMaxRank));
  if (spec.layout == EwLayout::Tiled) {
    int arrays = 0;
    for (int k = 0; k < spec.num_inputs; ++k) arrays |= spec.scalar[k] ? 0 : 1 << k;
    if (spec.ndim < 2 || spec.ndim > kMaxRank || spec.tiled_inputs == 0 || (spec.tiled_inputs & ~arrays) != 0)
      throw ValueError("elementwise codegen: a tiled kernel needs rank 2.." + std::to_string(kMaxRank) +
                       " and at least one tiled array input (rank " + std::to_string(spec.ndim) + ", tiled inputs " +
                       std::to_string(spec.tiled_inputs) + ")");
  }
  if (spec.layout == EwLayout::Strided && spec.unroll != 1 && spec.unroll != 2 && spec.unroll != 4)
    throw ValueError("elementwise codegen: unroll " + std::to_string(spec.unroll) + " is not 1, 2 or 4");
  if (spec.layout == EwLayout::Contiguous) {
    const int v = spec.vector_width;
    if (v < 1 || v > 16 || (v & (v - 1)) != 0)
      throw ValueError("elementwise codegen: vector width " + std::to_string(v) + " is not a power of two <= 16");
  }
  if (spec.layout == EwLayout::Contiguous) return contiguous_kernel(spec, name);
  if (spec.layout == EwLayout::Tiled) return tiled_kernel(spec, name);
  return strided_kernel(spec, name);
}
}  // namespace kiln::cuda_impl
