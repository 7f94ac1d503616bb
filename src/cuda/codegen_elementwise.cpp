// Source generation for elementwise kernels and the table of
// compiled built-in kernels (see codegen.hpp for the argument layouts).
//
// Every generated kernel is one `element()` function — inputs converted to the
// compute type, the op from the prelude, the result converted to the output's
// storage type — wrapped in one of four loops:
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
#include "kiln/error.hpp"

namespace kiln::cuda_impl {

using detail::OpCode;

// The op list's one dtype rule, shared with the CPU backend (so the two cannot disagree).
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
  const std::string name = detail::op_info(spec.op).name;
  s += "kd::cast<" + out + ">(kd::op_" + name + "<" + c + ">(";
  for (int k = 0; k < spec.num_inputs; ++k) {
    const bool condition = spec.op == OpCode::Where && k == 0;
    s += (k ? ", " : "") + std::string("kd::cast<") + (condition ? "bool" : c) + ">(x" + std::to_string(k) + ")";
  }
  return s + "));\n}\n";
}

/// The kernel's parameter list (pointers, scalars, then `extra`).
std::string parameter_list(const ElementwiseSpec& spec, const std::string& extra) {
  std::string s = device_type_name(spec.out) + std::string("* __restrict__ out");
  for (int k = 0; k < spec.num_inputs; ++k) {
    const std::string index = std::to_string(k);
    if (spec.scalar[k])
      s += ", const " + input_type(spec, k) + " s" + index;
    else
      s += ", const " + input_type(spec, k) + "* __restrict__ in" + index;
  }
  return s + extra;
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

void contiguous_kernel(std::string& s, const ElementwiseSpec& spec, const std::string& name) {
  const char* index = spec.index64 ? "unsigned long long" : "unsigned int";
  s += "typedef " + std::string(index) + " IDX;\n";
  const int vec = spec.vector_width;
  if (vec > 1) {
    s += "union VecOut { " + std::string(raw_type(vec * static_cast<int>(itemsize(spec.out)))) + " raw; " +
         device_type_name(spec.out) + " e[" + std::to_string(vec) + "]; };\n";
    for (int k = 0; k < spec.num_inputs; ++k) {
      if (spec.scalar[k]) continue;
      s += "union VecIn" + std::to_string(k) + " { " + raw_type(vec * static_cast<int>(itemsize(spec.in[k]))) +
           " raw; " + input_type(spec, k) + " e[" + std::to_string(vec) + "]; };\n";
    }
  }
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameter_list(spec, ", const IDX n") + ") {\n";
  s += "  const IDX step = (IDX)gridDim.x * blockDim.x;\n";
  s += "  const IDX first = (IDX)blockIdx.x * blockDim.x + threadIdx.x;\n";
  std::string tail_start = "first";
  if (vec > 1) {
    // Each thread keeps `unroll` vector loads per input in flight (4 for a copy or cast, 2 for a binary op):
    // one 16-byte load per thread is not enough bytes in flight to saturate HBM.
    int array_inputs = 0;
    for (int k = 0; k < spec.num_inputs; ++k) array_inputs += spec.scalar[k] ? 0 : 1;
    const int unroll = contiguous_unroll(array_inputs);
    const std::string v = std::to_string(vec), u = std::to_string(unroll);
    s += "  const IDX vectors = n / " + v + ";\n";
    s += "  for (IDX v = first; v < vectors; v += " + u + " * step) {\n";
    std::string call = "element(";
    for (int k = 0; k < spec.num_inputs; ++k) {
      const std::string i = std::to_string(k);
      call += k ? ", " : "";
      if (spec.scalar[k]) {
        call += "s" + i;
      } else {
        s += "    VecIn" + i + " a" + i + "[" + u + "];\n";
        s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u)\n      if (v + u * step < vectors) a" + i +
             "[u].raw = reinterpret_cast<const " + raw_type(vec * static_cast<int>(itemsize(spec.in[k]))) + "*>(in" +
             i + ")[v + u * step];\n";
        call += "a" + i + "[u].e[j]";
      }
    }
    s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u) {\n      if (v + u * step >= vectors) break;\n";
    s += "      VecOut o;\n#pragma unroll\n      for (int j = 0; j < " + v + "; ++j) o.e[j] = " + call + ");\n";
    s += "      reinterpret_cast<" + std::string(raw_type(vec * static_cast<int>(itemsize(spec.out)))) +
         "*>(out)[v + u * step] = o.raw;\n    }\n  }\n";
    tail_start = "vectors * " + v + " + first";
  }
  s += "  for (IDX i = " + tail_start + "; i < n; i += step) out[i] = " + element_call_at_i(spec) + ";\n}\n";
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

void strided_kernel(std::string& s, const ElementwiseSpec& spec, const std::string& name) {
  const int nd = spec.ndim;
  int operands = 1;
  for (int k = 0; k < spec.num_inputs; ++k) operands += spec.scalar[k] ? 0 : 1;
  const int stride_base = spec.index64 ? nd : 3 * nd;
  const int words = stride_base + operands * nd;
  s += spec.index64 ? "typedef unsigned long long IDX;\ntypedef long long OFF;\n"
                    : "typedef unsigned int IDX;\ntypedef int OFF;\n";
  s += "struct Params { IDX w[" + std::to_string(words) + "]; };\n";
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameter_list(spec, ", const Params p, const IDX n") + ") {\n";
  // With spec.unroll > 1 each thread handles several elements per iteration, all loads first: one 4-byte
  // load per thread is too few bytes in flight to keep HBM busy (a broadcast add reaches ~70% of it).
  const std::string u = std::to_string(spec.unroll);
  s += "  const IDX step = (IDX)gridDim.x * blockDim.x;\n";
  s += "  for (IDX base = (IDX)blockIdx.x * blockDim.x + threadIdx.x; base < n; base += " + u + " * step) {\n";
  s += "    OFF out_off[" + u + "];\n";
  for (int k = 0; k < spec.num_inputs; ++k)
    if (!spec.scalar[k]) s += "    " + input_type(spec, k) + " x" + std::to_string(k) + "[" + u + "];\n";
  s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u) {\n";
  s += "      const IDX i = base + u * step;\n      if (i >= n) break;\n";
  emit_strided_offsets(s, nd, operands, spec.index64, "      ");
  s += "      out_off[u] = o0;\n";
  int array_index = 0;
  std::string call = "element(";
  for (int k = 0; k < spec.num_inputs; ++k) {
    const std::string i = std::to_string(k);
    call += k ? ", " : "";
    if (spec.scalar[k]) {
      call += "s" + i;
    } else {
      s += "      x" + i + "[u] = in" + i + "[o" + std::to_string(++array_index) + "];\n";
      call += "x" + i + "[u]";
    }
  }
  s += "    }\n";
  s += "#pragma unroll\n    for (int u = 0; u < " + u + "; ++u) {\n      if (base + u * step >= n) break;\n";
  s += "      out[out_off[u]] = " + call + ");\n    }\n  }\n}\n";
}

// A block of 32 x 8 threads per 32 x 32 tile (grid-stride over tiles): the tiled inputs are read with
// threadIdx.x along axis b (their unit stride) into shared memory, padded to 33 columns so the transposed read
// hits 32 banks; then each thread computes with threadIdx.x along axis a (the output's unit stride), so the
// output and the other inputs (broadcast or unit stride along a) are read and written coalesced too.
void tiled_kernel(std::string& s, const ElementwiseSpec& spec, const std::string& name) {
  const int nd = spec.ndim, batch = nd - 2;
  int operands = 1;
  for (int k = 0; k < spec.num_inputs; ++k) operands += spec.scalar[k] ? 0 : 1;
  const int sa = 5, sb = 5 + operands, bsize = 5 + 2 * operands, bstride = bsize + batch;
  const int words = bstride + operands * batch;
  const auto w = [](int i) { return "p.w[" + std::to_string(i) + "]"; };
  s += spec.index64 ? "typedef unsigned long long IDX;\ntypedef long long OFF;\n"
                    : "typedef unsigned int IDX;\ntypedef int OFF;\n";
  s += "struct Params { IDX w[" + std::to_string(words) + "]; };\n";
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" +
       parameter_list(spec, ", const Params p") + ") {\n";
  for (int k = 0; k < spec.num_inputs; ++k)
    if (spec.tiled_inputs & (1 << k))
      s += "  __shared__ " + input_type(spec, k) + " t" + std::to_string(k) + "[32][33];\n";
  s += "  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;\n";
  s += "  for (IDX t = blockIdx.x; t < " + w(4) + "; t += gridDim.x) {\n";
  s += "    IDX q = t;\n    const IDX a0 = (q % " + w(2) + ") * 32;\n    q /= " + w(2) + ";\n";
  s += "    const IDX b0 = (q % " + w(3) + ") * 32;\n    q /= " + w(3) + ";\n";
  s += "    OFF";
  for (int k = 0; k < operands; ++k) s += (k ? ", o" : " o") + std::to_string(k) + " = 0";
  s += ";\n";
  for (int d = batch - 1; d >= 0; --d) {
    s += "    {\n      const OFF r = (OFF)(q % " + w(bsize + d) + ");\n      q /= " + w(bsize + d) + ";\n";
    for (int k = 0; k < operands; ++k)
      s += "      o" + std::to_string(k) + " += r * (OFF)" + w(bstride + k * batch + d) + ";\n";
    s += "    }\n";
  }
  const auto at = [&](int operand) {
    const std::string k = std::to_string(operand);
    return "o" + k + " + (OFF)a * (OFF)" + w(sa + operand) + " + (OFF)b * (OFF)" + w(sb + operand);
  };
  s += "#pragma unroll\n    for (int jj = 0; jj < 32; jj += 8) {\n      const int j = ty + jj;\n";
  s += "      const IDX a = a0 + j, b = b0 + tx;\n      if (a < " + w(0) + " && b < " + w(1) + ") {\n";
  int array_index = 0;
  for (int k = 0; k < spec.num_inputs; ++k) {
    if (spec.scalar[k]) continue;
    ++array_index;
    if (spec.tiled_inputs & (1 << k))
      s += "        t" + std::to_string(k) + "[j][tx] = in" + std::to_string(k) + "[" + at(array_index) + "];\n";
  }
  s += "      }\n    }\n    __syncthreads();\n";
  s += "#pragma unroll\n    for (int jj = 0; jj < 32; jj += 8) {\n      const int j = ty + jj;\n";
  s += "      const IDX a = a0 + tx, b = b0 + j;\n      if (a < " + w(0) + " && b < " + w(1) + ") {\n";
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
  s += "        out[" + at(0) + "] = " + call + ");\n      }\n    }\n    __syncthreads();\n  }\n}\n";
}

void sequence_kernel(std::string& s, const ElementwiseSpec& spec, const std::string& name) {
  const std::string out = device_type_name(spec.out);
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name + "(" + out +
       "* __restrict__ out, const double start, const double step, const long long istart, const long long istep, "
       "const int exact_int, const int endpoint, const double stop, const long long n) {\n";
  s += "  const long long grid = (long long)gridDim.x * blockDim.x;\n";
  s += "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += grid) {\n";
  s += "    " + out + " v;\n";
  s += "    if (endpoint && i == n - 1) v = kd::cast<" + out + ">(stop);\n";
  s += "    else if (exact_int) v = kd::cast<" + out +
       ">((long long)((unsigned long long)istart + (unsigned long long)i * (unsigned long long)istep));\n";
  // Explicit rounding steps: the CPU computes start + i * step with two roundings, never an fma.
  s += "    else v = kd::cast<" + out + ">(__dadd_rn(start, __dmul_rn((double)i, step)));\n";
  s += "    out[i] = v;\n  }\n}\n";
}

}  // namespace

const char* device_type_name(DType t) {
  constexpr const char* names[] = {"bool",   "kd::i8",     "kd::i16",    "kd::i32", "kd::i64",
                                   "kd::u8", "kd::half_t", "kd::bf16_t", "float",   "double"};
  return names[static_cast<int>(t)];
}

const char* dtype_tag(DType t) {
  constexpr const char* tags[] = {"b8", "i8", "i16", "i32", "i64", "u8", "f16", "bf16", "f32", "f64"};
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
    name += "_strided" + std::to_string(spec.ndim) + (spec.unroll > 1 ? "_u" + std::to_string(spec.unroll) : "");
  return name + (spec.index64 ? "_i64" : "_i32");
}

std::string elementwise_source(const ElementwiseSpec& spec) { return device_prelude() + elementwise_kernel_code(spec); }

std::string elementwise_kernel_code(const ElementwiseSpec& spec) {
  const std::string name = elementwise_kernel_name(spec);
  std::string s = "// " + name + " (generated by kiln)\nnamespace " + name + "_ns {\n";
  s.reserve(4096);
  if (spec.layout == EwLayout::Sequence) {
    sequence_kernel(s, spec, name);
    return s + "}  // namespace\n";
  }
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
  s += element_function(spec);
  if (spec.layout == EwLayout::Contiguous)
    contiguous_kernel(s, spec, name);
  else if (spec.layout == EwLayout::Tiled)
    tiled_kernel(s, spec, name);
  else
    strided_kernel(s, spec, name);
  return s + "}  // namespace\n";
}

// ------------------------------------------------------------------ the kernel table

const KernelTable::Entry* KernelTable::find(const BuiltinKernelKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  return it->second.get();
}

const KernelTable::Entry* KernelTable::insert(const BuiltinKernelKey& key, Entry entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = entries_.try_emplace(key, nullptr);
  if (inserted) it->second = std::make_unique<Entry>(std::move(entry));
  return it->second.get();
}

uint64_t KernelTable::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

uint64_t KernelTable::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

size_t KernelTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

KernelTable& kernel_table() {
  // Never destroyed: unloading modules while the CUDA runtime shuts down at exit is not safe.
  static KernelTable* table = new KernelTable;
  return *table;
}

const std::vector<std::string>& builtin_kernel_options() {
  static const std::vector<std::string> options = {"--fmad=false"};
  return options;
}

}  // namespace kiln::cuda_impl
