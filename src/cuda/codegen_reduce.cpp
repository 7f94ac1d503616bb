// Source generation for reduction kernels (see codegen.hpp for the argument
// layout and reduce.cpp for how the host picks a layout).
//
// A generated reduction kernel is the prelude's operator (kd::red_*) plus:
// - load(x, r): one input element (logical reduced index r) as an accumulator;
// - store(acc): the final accumulator as the output's storage type;
// - kept_offsets(o): input and output offsets of output element o;
// - reduced_offset(r): input offset of reduced element r (logical C order);
// and one of two loops:
// - Rows: `group` threads (1..32 sharing a warp, or the whole block) reduce one
//   (output, split) task: a strided walk over the task's range of reduced
//   elements, 16-byte vector loads when the reduced axis is contiguous, four loads
//   in flight per thread, then a butterfly of warp shuffles (and shared memory
//   across the warps of a block);
// - Columns: a 32 x 8 block; threadIdx.x picks adjacent outputs (coalesced when
//   the innermost kept axis is contiguous), threadIdx.y strides over the reduced
//   range, and the 8 partial values meet in shared memory.
// Both write either the output (converted) or, for a split reduction, an
// accumulator per (output, split) that a second Rows pass with from_partials reduces.
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>

#include "cuda/codegen.hpp"
#include "cuda/device_functions.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {

using detail::ReduceOp;

namespace {

bool is_arg(ReduceOp op) { return detail::is_index_reduction(op); }

/// The CUDA columns of src/core/reductions_internal.def, by ReduceOp.
struct ReduceCode {
  const char* op;
  const char* load;
  const char* store;
};
constexpr ReduceCode kReduceCode[] = {
#define KILN_REDUCE_KERNEL(Code, result, empty, fuse, derivative, acc, cpu, cuda_op, cuda_load, cuda_store) \
  {cuda_op, cuda_load, cuda_store},
#include "core/reductions_internal.def"
};
static_assert(std::size(kReduceCode) == static_cast<size_t>(detail::kNumReduceKernels));

const ReduceCode& reduce_code(ReduceOp op) {
  if (!detail::is_reduce_kernel(op))
    throw ValueError(std::string("cuda reduce codegen: ") + detail::reduce_op_name(op) +
                     " is composed by the core and has no kernel of its own");
  return kReduceCode[static_cast<int>(op)];
}

/// `text` with every `$key` replaced by its value.
std::string substitute(std::string text, std::initializer_list<std::pair<const char*, std::string>> values) {
  for (const auto& [key, value] : values)
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, std::strlen(key), value);
  return text;
}

std::string accumulator_type(const ReduceSpec& spec) {
  const std::string value = device_type_name(spec.acc);
  return is_arg(spec.op) ? "kd::arg_t<" + value + ">" : value;
}

/// Typedefs, Params and the load/store/offset helpers shared by both layouts.
void common_part(std::string& s, const ReduceSpec& spec) {
  const int kn = spec.kept_ndim, rn = spec.reduced_ndim;
  const std::string acc = accumulator_type(spec);
  s += spec.index64 ? "typedef unsigned long long IDX;\ntypedef long long OFF;\n"
                    : "typedef unsigned int IDX;\ntypedef int OFF;\n";
  s += "typedef " + acc + " ACC;\ntypedef " + reduce_operator_type(spec.op, spec.acc) + " Op;\n";
  s += "typedef " + (spec.from_partials ? std::string("ACC") : std::string(device_type_name(spec.in))) + " IN;\n";
  s += "typedef " + (spec.to_partials ? std::string("ACC") : std::string(device_type_name(spec.out))) + " OUT;\n";
  const int kept_size = 0, kept_in = kn, kept_out = 2 * kn, red_size = 3 * kn, red_stride = 3 * kn + rn;
  const int scalars = 3 * kn + 2 * rn;
  s += "struct Params { IDX w[" + std::to_string(scalars + 4) + "]; };\n";
  s += "constexpr int kNumOut = " + std::to_string(scalars) + ", kNumRed = " + std::to_string(scalars + 1) +
       ", kSplits = " + std::to_string(scalars + 2) + ", kChunk = " + std::to_string(scalars + 3) + ";\n";

  // load(x, r)
  s += "__device__ __forceinline__ ACC load(IN x, IDX r) {\n  (void)r;\n  return ";
  if (spec.from_partials) {
    s += "x";
  } else {
    s += reduce_load_expression(spec.op, device_type_name(spec.acc), "x", "r");
  }
  s += ";\n}\n";
  // store(acc)
  if (!spec.to_partials) {
    const std::string out = device_type_name(spec.out);
    s += "__device__ __forceinline__ OUT store(ACC a) { return kd::cast<" + out + ">(" +
         substitute(reduce_code(spec.op).store, {{"$a", "a"}}) + "); }\n";
  }
  // kept_offsets(o)
  s += "__device__ __forceinline__ void kept_offsets(const Params& p, IDX o, OFF& in_off, OFF& out_off) {\n";
  s += "  in_off = 0;\n  out_off = 0;\n";
  if (kn == 0) {
    s += "  (void)p;\n  (void)o;\n";
  } else {
    if (kn > 1) {
      s += "#pragma unroll\n  for (int d = " + std::to_string(kn - 1) + "; d >= 1; --d) {\n";
      s += "    const IDX q = o / p.w[" + std::to_string(kept_size) + " + d];\n";
      s += "    const OFF r = (OFF)(o - q * p.w[" + std::to_string(kept_size) + " + d]);\n    o = q;\n";
      s += "    in_off += r * (OFF)p.w[" + std::to_string(kept_in) + " + d];\n";
      s += "    out_off += r * (OFF)p.w[" + std::to_string(kept_out) + " + d];\n  }\n";
    }
    s += "  in_off += (OFF)o * (OFF)p.w[" + std::to_string(kept_in) + "];\n";
    s += "  out_off += (OFF)o * (OFF)p.w[" + std::to_string(kept_out) + "];\n";
  }
  s += "}\n";
  // reduced_offset(r)
  s += "__device__ __forceinline__ OFF reduced_offset(const Params& p, IDX r) {\n  OFF off = 0;\n";
  if (rn > 1) {
    s += "#pragma unroll\n  for (int d = " + std::to_string(rn - 1) + "; d >= 1; --d) {\n";
    s += "    const IDX q = r / p.w[" + std::to_string(red_size) + " + d];\n";
    s += "    off += (OFF)(r - q * p.w[" + std::to_string(red_size) + " + d]) * (OFF)p.w[" +
         std::to_string(red_stride) + " + d];\n    r = q;\n  }\n";
  }
  s += "  return off + (OFF)r * (OFF)p.w[" + std::to_string(red_stride) + "];\n}\n";
}

/// The loop accumulating reduced elements [r0, r1) of the task at `base` into `acc`; thread `lane` of
/// `width` threads takes every width-th element (every width-th vector when vectorised).
void accumulate_loop(std::string& s, const ReduceSpec& spec, const std::string& lane, const std::string& width) {
  const int vec = spec.vector_width;
  if (vec > 1) {
    const std::string v = std::to_string(vec);
    const std::string raw = vec * itemsize(spec.in) == 16  ? "uint4"
                            : vec * itemsize(spec.in) == 8 ? "uint2"
                                                           : "unsigned int";
    s += "      union Vec { " + raw + " raw; IN e[" + v + "]; };\n";
    s += "      const IDX vectors = r1 > r0 ? (r1 - r0) / " + v + " : 0;\n";
    s += "      const " + raw + "* vp = reinterpret_cast<const " + raw + "*>(base + r0);\n";
    s += "      IDX v = " + lane + ";\n";
    s += "      for (; v + 3 * " + width + " < vectors; v += 4 * " + width + ") {\n";
    s += "        Vec u[4];\n#pragma unroll\n        for (int k = 0; k < 4; ++k) u[k].raw = vp[v + k * " + width +
         "];\n";
    s += "#pragma unroll\n        for (int k = 0; k < 4; ++k)\n#pragma unroll\n          for (int j = 0; j < " + v +
         "; ++j) acc = Op::combine(acc, load(u[k].e[j], r0 + (v + k * " + width + ") * " + v + " + j));\n      }\n";
    s += "      for (; v < vectors; v += " + width + ") {\n        Vec u;\n        u.raw = vp[v];\n";
    s += "#pragma unroll\n        for (int j = 0; j < " + v + "; ++j) acc = Op::combine(acc, load(u.e[j], r0 + v * " +
         v + " + j));\n      }\n";
    s += "      for (IDX r = r0 + vectors * " + v + " + " + lane + "; r < r1; r += " + width +
         ") acc = Op::combine(acc, load(base[r], r));\n";
  } else if (spec.reduced_ndim == 1) {
    s += "      const OFF rs = (OFF)p.w[" + std::to_string(3 * spec.kept_ndim + 1) + "];\n";
    s += "      IDX r = r0 + " + lane + ";\n";
    s += "      for (; r + 3 * " + width + " < r1; r += 4 * " + width + ") {\n        IN x[4];\n";
    s += "#pragma unroll\n        for (int k = 0; k < 4; ++k) x[k] = base[(OFF)(r + k * " + width + ") * rs];\n";
    s += "#pragma unroll\n        for (int k = 0; k < 4; ++k) acc = Op::combine(acc, load(x[k], r + k * " + width +
         "));\n      }\n";
    s += "      for (; r < r1; r += " + width + ") acc = Op::combine(acc, load(base[(OFF)r * rs], r));\n";
  } else {
    s += "      for (IDX r = r0 + " + lane + "; r < r1; r += " + width +
         ") acc = Op::combine(acc, load(base[reduced_offset(p, r)], r));\n";
  }
}

void rows_kernel(std::string& s, const ReduceSpec& spec, const std::string& name) {
  const int g = spec.group;
  const std::string gs = std::to_string(g);
  const std::string groups = std::to_string(kBlockSize / g);
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name +
       "(const IN* __restrict__ in, OUT* __restrict__ out, const Params p) {\n";
  s += "  const IDX num_out = p.w[kNumOut], num_red = p.w[kNumRed], splits = p.w[kSplits], chunk = p.w[kChunk];\n";
  s += "  const IDX lane = threadIdx.x % " + gs + ";\n";
  if (g == kBlockSize) s += "  __shared__ ACC warp_acc[" + std::to_string(kBlockSize / 32) + "];\n";
  s += "  const IDX tasks = num_out * splits;\n";
  s += "  for (IDX task = (IDX)blockIdx.x * " + groups + " + threadIdx.x / " + gs +
       "; task < tasks; task += (IDX)gridDim.x * " + groups + ") {\n";
  s += "    const IDX o = task / splits, split = task - o * splits;\n";
  s += "    OFF in_off, out_off;\n    kept_offsets(p, o, in_off, out_off);\n";
  s += "    const IDX r0 = split * chunk;\n";
  s += "    const IDX r1 = r0 + chunk < num_red ? r0 + chunk : num_red;\n";
  s += "    ACC acc = Op::identity();\n";
  s += "    if (r0 < r1) {\n      const IN* base = in + in_off;\n";
  accumulate_loop(s, spec, "lane", gs);
  s += "    }\n";
  emit_group_combine(s, g);
  s += "    if (lane == 0) out[" + std::string(spec.to_partials ? "task" : "out_off") +
       "] = " + (spec.to_partials ? "acc" : "store(acc)") + ";\n";
  s += "  }\n}\n";
}

void columns_kernel(std::string& s, const ReduceSpec& spec, const std::string& name) {
  const int rows = kBlockSize / 32;
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlockSize) + ") " + name +
       "(const IN* __restrict__ in, OUT* __restrict__ out, const Params p) {\n";
  s += "  const IDX num_out = p.w[kNumOut], num_red = p.w[kNumRed], splits = p.w[kSplits], chunk = p.w[kChunk];\n";
  s += "  __shared__ ACC partial[" + std::to_string(rows) + "][33];\n";
  s += "  const IDX o = (IDX)blockIdx.x * 32 + threadIdx.x, split = blockIdx.y;\n";
  s += "  ACC acc = Op::identity();\n  OFF in_off = 0, out_off = 0;\n";
  s += "  if (o < num_out) {\n    kept_offsets(p, o, in_off, out_off);\n";
  s += "    const IDX r0 = split * chunk;\n";
  s += "    const IDX r1 = r0 + chunk < num_red ? r0 + chunk : num_red;\n";
  s += "    if (r0 < r1) {\n      const IN* base = in + in_off;\n";
  accumulate_loop(s, spec, "(IDX)threadIdx.y", std::to_string(rows));
  s += "    }\n  }\n";
  s += "  partial[threadIdx.y][threadIdx.x] = acc;\n  __syncthreads();\n";
  s += "  if (threadIdx.y == 0 && o < num_out) {\n";
  s += "#pragma unroll\n    for (int k = 1; k < " + std::to_string(rows) +
       "; ++k) acc = Op::combine(acc, partial[k][threadIdx.x]);\n";
  s += "    out[" + std::string(spec.to_partials ? "o * splits + split" : "out_off") +
       "] = " + (spec.to_partials ? "acc" : "store(acc)") + ";\n  }\n}\n";
}

}  // namespace

void emit_group_combine(std::string& s, int group) {
  const int g = group;
  const std::string gs = std::to_string(g);
  if (g > 1 && g <= 32) {
    s += "    const unsigned mask = " +
         (g == 32 ? std::string("0xffffffffu")
                  : "(" + std::to_string((1ull << g) - 1) + "u << (threadIdx.x % 32 / " + gs + " * " + gs + "))") +
         ";\n";
    s += "#pragma unroll\n    for (int m = " + std::to_string(g / 2) +
         "; m > 0; m /= 2) acc = Op::combine(acc, kd::shfl_xor(acc, m, mask));\n";
  } else if (g == kBlockSize) {
    s += "#pragma unroll\n    for (int m = 16; m > 0; m /= 2) acc = Op::combine(acc, kd::shfl_xor(acc, m, "
         "0xffffffffu));\n";
    s += "    if (threadIdx.x % 32 == 0) warp_acc[threadIdx.x / 32] = acc;\n    __syncthreads();\n";
    s += "    if (threadIdx.x < 32) {\n      acc = threadIdx.x < " + std::to_string(kBlockSize / 32) +
         " ? warp_acc[threadIdx.x] : Op::identity();\n";
    s += "#pragma unroll\n      for (int m = " + std::to_string(kBlockSize / 64) +
         "; m > 0; m /= 2) acc = Op::combine(acc, kd::shfl_xor(acc, m, 0xffffffffu));\n    }\n";
    s += "    __syncthreads();\n";
  }
}

std::string reduce_operator_type(ReduceOp op, DType acc_dtype) {
  return substitute(reduce_code(op).op, {{"$v", device_type_name(acc_dtype)}});
}

std::string reduce_load_expression(ReduceOp op, const std::string& value_type, const std::string& x,
                                   const std::string& r) {
  return substitute(reduce_code(op).load, {{"$x", x}, {"$r", r}, {"$v", value_type}});
}

DType reduce_accumulator_dtype(ReduceOp op, DType in, DType out) {
  switch (detail::reduce_info(op).acc) {
    case detail::ReduceAcc::Truth:
      return DType::Bool;
    case detail::ReduceAcc::Float64:
      return DType::Float64;
    case detail::ReduceAcc::Arith:  // integers: exact wrapping int64, converted once (also into a float out)
      if (!is_floating(in)) return DType::Int64;
      return in == DType::Float64 || out == DType::Float64 ? DType::Float64 : DType::Float32;
    case detail::ReduceAcc::Native:  // max, min, argmax, argmin: every input value is exact in the accumulator
    case detail::ReduceAcc::Index:
      if (!is_floating(in)) return DType::Int64;
      return in == DType::Float64 ? DType::Float64 : DType::Float32;
    case detail::ReduceAcc::None:
      break;
  }
  throw ValueError(std::string("cuda reduce: ") + detail::reduce_op_name(op) + " has no kernel accumulator");
}

int64_t reduce_accumulator_size(const ReduceSpec& spec) { return is_arg(spec.op) ? 16 : itemsize(spec.acc); }

std::string reduce_kernel_name(const ReduceSpec& spec) {
  std::string name = std::string("kiln_") + detail::reduce_op_name(spec.op) + "_" + dtype_tag(spec.in) + "_a" +
                     dtype_tag(spec.acc) + "_" + (spec.to_partials ? std::string("partial") : dtype_tag(spec.out));
  if (spec.from_partials) name += "_final";
  name += spec.layout == ReduceLayout::Rows ? "_rows_g" + std::to_string(spec.group) : std::string("_cols");
  name += "_k" + std::to_string(spec.kept_ndim) + "_r" + std::to_string(spec.reduced_ndim);
  if (spec.vector_width > 1) name += "_v" + std::to_string(spec.vector_width);
  return name + (spec.index64 ? "_i64" : "_i32");
}

std::string reduce_source(const ReduceSpec& spec) { return device_prelude() + reduce_kernel_code(spec); }

std::string reduce_kernel_code(const ReduceSpec& spec) {
  const std::string name = reduce_kernel_name(spec);
  const auto fail = [&](const std::string& why) { throw ValueError("reduction codegen (" + name + "): " + why); };
  if (spec.kept_ndim < 0 || spec.kept_ndim > kMaxRank) fail("kept rank out of range");
  if (spec.reduced_ndim < 1 || spec.reduced_ndim > kMaxRank) fail("reduced rank out of range");
  const int g = spec.group;
  if (spec.layout == ReduceLayout::Rows && !(g == kBlockSize || (g >= 1 && g <= 32 && (g & (g - 1)) == 0)))
    fail("group must be a power of two <= 32 or the block size");
  const int v = spec.vector_width;
  if (v > 1 && (spec.from_partials || spec.reduced_ndim != 1 || (v & (v - 1)) != 0 || v * itemsize(spec.in) > 16 ||
                v * itemsize(spec.in) < 4))
    fail("vector loads need one contiguous reduced axis of input elements and 4..16-byte vectors");
  std::string s = "// " + name + " (generated by kiln)\nnamespace " + name + "_ns {\n";
  s.reserve(6144);
  common_part(s, spec);
  if (spec.layout == ReduceLayout::Rows)
    rows_kernel(s, spec, name);
  else
    columns_kernel(s, spec, name);
  return s + "}  // namespace\n";
}

}  // namespace kiln::cuda_impl
