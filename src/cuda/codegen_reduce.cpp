// Source generation for reduction kernels (see codegen.hpp for the argument
// layout and reduce.cpp for how the host picks a layout).
//
// A generated reduction kernel (the templates reduce_*.cuh.in of src/cuda/kernels) is the prelude's operator
// (kd::red_*) plus:
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
#include "cuda/template.hpp"
#include "kernel_sources/reduce_accumulate_axis.cuh.in.hpp"
#include "kernel_sources/reduce_accumulate_vectors.cuh.in.hpp"
#include "kernel_sources/reduce_columns.cuh.in.hpp"
#include "kernel_sources/reduce_combine_block.cuh.in.hpp"
#include "kernel_sources/reduce_combine_warp.cuh.in.hpp"
#include "kernel_sources/reduce_common.cuh.in.hpp"
#include "kernel_sources/reduce_rows.cuh.in.hpp"
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

/// The helpers both layouts share (reduce_common.cuh.in) around `kernel`, the layout's kernel.
std::string with_common_part(const ReduceSpec& spec, const std::string& name, const std::string& kernel) {
  const int kn = spec.kept_ndim, rn = spec.reduced_ndim;
  const int kept_size = 0, kept_in = kn, kept_out = 2 * kn, red_size = 3 * kn, red_stride = 3 * kn + rn;
  const int scalars = 3 * kn + 2 * rn;
  const std::string store = spec.to_partials ? std::string()
                                             : "__device__ __forceinline__ OUT store(ACC a) { return kd::cast<" +
                                                   std::string(device_type_name(spec.out)) + ">(" +
                                                   substitute(reduce_code(spec.op).store, {{"$a", "a"}}) + "); }\n";
  std::string kept;
  if (kn == 0) {
    kept = "  (void)p;\n  (void)o;\n";
  } else {
    if (kn > 1) {
      kept += "#pragma unroll\n  for (int d = " + std::to_string(kn - 1) + "; d >= 1; --d) {\n";
      kept += "    const IDX q = o / p.w[" + std::to_string(kept_size) + " + d];\n";
      kept += "    const OFF r = (OFF)(o - q * p.w[" + std::to_string(kept_size) + " + d]);\n    o = q;\n";
      kept += "    in_off += r * (OFF)p.w[" + std::to_string(kept_in) + " + d];\n";
      kept += "    out_off += r * (OFF)p.w[" + std::to_string(kept_out) + " + d];\n  }\n";
    }
    kept += "  in_off += (OFF)o * (OFF)p.w[" + std::to_string(kept_in) + "];\n";
    kept += "  out_off += (OFF)o * (OFF)p.w[" + std::to_string(kept_out) + "];\n";
  }
  std::string reduced;
  if (rn > 1) {
    reduced += "#pragma unroll\n  for (int d = " + std::to_string(rn - 1) + "; d >= 1; --d) {\n";
    reduced += "    const IDX q = r / p.w[" + std::to_string(red_size) + " + d];\n";
    reduced += "    off += (OFF)(r - q * p.w[" + std::to_string(red_size) + " + d]) * (OFF)p.w[" +
               std::to_string(red_stride) + " + d];\n    r = q;\n  }\n";
  }
  return fill_template(
      "reduce_common.cuh.in", kernel_sources::reduce_common_cuh_in,
      {{"name", name},
       {"layout", spec.layout == ReduceLayout::Rows ? "rows" : "columns"},
       {"index_type", spec.index64 ? "unsigned long long" : "unsigned int"},
       {"offset_type", spec.index64 ? "long long" : "int"},
       {"acc_type", accumulator_type(spec)},
       {"operator_type", reduce_operator_type(spec.op, spec.acc)},
       {"in_type", spec.from_partials ? std::string("ACC") : std::string(device_type_name(spec.in))},
       {"out_type", spec.to_partials ? std::string("ACC") : std::string(device_type_name(spec.out))},
       {"param_words", std::to_string(scalars + 4)},
       {"num_out_word", std::to_string(scalars)},
       {"load",
        spec.from_partials ? std::string("x") : reduce_load_expression(spec.op, device_type_name(spec.acc), "x", "r")},
       {"store", store},
       {"kept_offsets", kept},
       {"reduced_loop", reduced},
       {"reduced_stride", std::to_string(red_stride)},
       {"kernel", kernel}});
}

/// The loop accumulating reduced elements [r0, r1) of the task at `base` into `acc`; thread `lane` of
/// `width` threads takes every width-th element (every width-th vector when vectorised).
std::string accumulate_loop(const ReduceSpec& spec, const std::string& lane, const std::string& width) {
  const int vec = spec.vector_width;
  if (vec > 1) {
    const int bytes = vec * static_cast<int>(itemsize(spec.in));
    return fill_template("reduce_accumulate_vectors.cuh.in", kernel_sources::reduce_accumulate_vectors_cuh_in,
                         {{"width", std::to_string(vec)},
                          {"raw", bytes == 16  ? "uint4"
                                  : bytes == 8 ? "uint2"
                                               : "unsigned int"},
                          {"lane", lane},
                          {"threads", width}});
  }
  if (spec.reduced_ndim == 1)
    return fill_template("reduce_accumulate_axis.cuh.in", kernel_sources::reduce_accumulate_axis_cuh_in,
                         {{"stride_word", std::to_string(3 * spec.kept_ndim + 1)}, {"lane", lane}, {"threads", width}});
  return "      for (IDX r = r0 + " + lane + "; r < r1; r += " + width +
         ") acc = Op::combine(acc, load(base[reduced_offset(p, r)], r));\n";
}

std::string rows_kernel(const ReduceSpec& spec, const std::string& name) {
  const int g = spec.group;
  std::string combine;
  emit_group_combine(combine, g);
  return fill_template(
      "reduce_rows.cuh.in", kernel_sources::reduce_rows_cuh_in,
      {{"name", name},
       {"block_size", std::to_string(kBlockSize)},
       {"group", std::to_string(g)},
       {"groups", std::to_string(kBlockSize / g)},
       {"warp_acc", g == kBlockSize ? "  __shared__ ACC warp_acc[" + std::to_string(kBlockSize / 32) + "];" : ""},
       {"accumulate", accumulate_loop(spec, "lane", std::to_string(g))},
       {"group_combine", combine},
       {"out_index", spec.to_partials ? "task" : "out_off"},
       {"out_value", spec.to_partials ? "acc" : "store(acc)"}});
}

std::string columns_kernel(const ReduceSpec& spec, const std::string& name) {
  const int rows = kBlockSize / 32;
  return fill_template("reduce_columns.cuh.in", kernel_sources::reduce_columns_cuh_in,
                       {{"name", name},
                        {"block_size", std::to_string(kBlockSize)},
                        {"rows", std::to_string(rows)},
                        {"accumulate", accumulate_loop(spec, "(IDX)threadIdx.y", std::to_string(rows))},
                        {"out_index", spec.to_partials ? "o * splits + split" : "out_off"},
                        {"out_value", spec.to_partials ? "acc" : "store(acc)"}});
}

}  // namespace

void emit_group_combine(std::string& s, int group) {
  const int g = group;
  if (g > 1 && g <= 32) {
    const std::string mask = g == 32 ? std::string("0xffffffffu")
                                     : "(" + std::to_string((1ull << g) - 1) + "u << (threadIdx.x % 32 / " +
                                           std::to_string(g) + " * " + std::to_string(g) + "))";
    s += fill_template("reduce_combine_warp.cuh.in", kernel_sources::reduce_combine_warp_cuh_in,
                       {{"group", std::to_string(g)}, {"mask", mask}, {"half", std::to_string(g / 2)}});
  } else if (g == kBlockSize) {
    s += fill_template("reduce_combine_block.cuh.in", kernel_sources::reduce_combine_block_cuh_in,
                       {{"warps", std::to_string(kBlockSize / 32)}, {"half_warps", std::to_string(kBlockSize / 64)}});
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
      if (is_complex(in)) return DType::Complex128;  // as the CPU's complex sums and products
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
  return with_common_part(spec, name,
                          spec.layout == ReduceLayout::Rows ? rows_kernel(spec, name) : columns_kernel(spec, name));
}

}  // namespace kiln::cuda_impl
