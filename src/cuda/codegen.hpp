// Code generation for the GPU's built-in elementwise and reduction kernels
// (internal). "dtype is data": a kernel is described by a small spec (op,
// dtypes, layout class, vector width, rank, index width); the spec itself, with the
// device, is the kernel table's key (compared field by field, so two different
// kernels never share an entry), and only on a table miss is it turned into
// CUDA source (the prelude of device_functions.hpp + one kernel, filled in from
// a template of src/cuda/kernels) and compiled with NVRTC. The generators contain no CUDA runtime calls, so they are
// tested without a GPU by compiling their output to PTX.
//
// Kernel argument layouts (the host side in elementwise.cpp/reduce.cpp fills
// exactly these):
// - contiguous elementwise: (out*, in_k* or scalar_k..., n) with n of the index type;
// - strided elementwise: (out*, in_k* or scalar_k..., Params, n) where Params is
//   one array of index-type words: size[ndim], then for 32-bit indexing magic[ndim]
//   and shift[ndim] (division by invariant integers), then stride[array operand][ndim]
//   in elements, output first;
// - tiled elementwise: (out*, in_k* or scalar_k..., Params) where Params is one array of
//   index-type words: size_a, size_b (a: the output's innermost axis, b: the axis along which
//   the tiled inputs are contiguous), tiles_a, tiles_b, total tiles, then stride_a[array
//   operand], stride_b[array operand], then the other (batch) axes: size[ndim - 2], then
//   stride[array operand][ndim - 2]; one block (32 x 8 threads) per 32 x 32 tile;
// - sequence (arange/linspace): (out*, double start, double step, i64 istart, i64 istep,
//   i32 exact_int, i32 endpoint, double stop, i64 n);
// - reduction: (const in*, out*, Params) with Params an array of index-type words:
//   kept size/in stride/out stride [kept_ndim each], reduced size/stride [reduced_ndim
//   each], then num_out, num_reduced, splits, chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/kernel_memo.hpp"
#include "core/op_table.hpp"
#include "cuda/kernel_table.hpp"
#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"  // kMaxRank: the largest rank of every generated kernel

namespace kiln::detail {
struct FusionGraph;
}  // namespace kiln::detail

namespace kiln::cuda_impl {

/// Threads per block of every generated kernel.
inline constexpr int kBlockSize = 256;

// ------------------------------------------------------------------ elementwise

/// Contiguous: one flat axis; Strided: any coalesced layout; Sequence: arange/linspace; Tiled: an input transposed
/// relative to the output, staged through 32x32 shared-memory tiles so reads and writes are both coalesced.
enum class EwLayout : uint8_t { Contiguous, Strided, Sequence, Tiled };

/// Everything an elementwise kernel's source depends on.
struct ElementwiseSpec {
  detail::OpCode op = detail::OpCode::Identity;
  int num_inputs = 0;
  DType out = DType::Float32;      ///< output storage dtype
  DType compute = DType::Float32;  ///< the call's compute dtype (16-bit floats compute in float)
  DType in[3] = {DType::Float32, DType::Float32, DType::Float32};  ///< array: storage dtype; scalar: its argument dtype
  bool scalar[3] = {false, false, false};                          ///< input k is a kernel argument, not an array
  bool raw_copy = false;                                           ///< identity between equal dtypes: copy the bits
  EwLayout layout = EwLayout::Contiguous;
  int vector_width = 1;  ///< contiguous, strided: elements per vector load/store (16 bytes for the widest operand;
                         ///< strided: along the innermost axis, dense in every array operand)
  int ndim = 1;          ///< strided, tiled: coalesced rank, 1..kMaxRank (tiled: 2..kMaxRank)
  int unroll = 1;        ///< strided: elements per thread and iteration, loads first (1 or 4)
  int tiled_inputs = 0;  ///< tiled: bit k set when array input k is read through a shared-memory tile
  bool index64 = false;  ///< 64-bit indices and offsets

  bool operator==(const ElementwiseSpec&) const = default;
};

/// Name of the generated kernel, e.g. "kiln_add_f32_f32_f32_contig_v4_i32" (shows up in profilers).
std::string elementwise_kernel_name(const ElementwiseSpec& spec);
/// Complete CUDA source (prelude + kernel) for `spec`; throws DTypeError for an op the dtypes do not support.
std::string elementwise_source(const ElementwiseSpec& spec);
/// The kernel part of elementwise_source (no prelude), wrapped in a namespace named after the kernel so
/// several kernels can share one program.
std::string elementwise_kernel_code(const ElementwiseSpec& spec);
/// Whether `op` has a GPU definition for compute dtype `compute`: detail::op_supports, the rule the CPU uses too
/// (complex dtypes included).
bool elementwise_op_supported(detail::OpCode op, DType compute);

/// Names the offset code of a strided kernel uses; the built-ins' are the defaults, user kernels prefix theirs
/// so they cannot clash with user code.
struct StridedNames {
  const char* params = "p";   ///< the Params argument
  const char* index = "i";    ///< the flat index (an IDX in scope)
  const char* rem = "rem";    ///< scratch variable
  const char* offset = "o";   ///< operand k's offset is `offset` followed by k
  const char* idx = "IDX";    ///< index type
  const char* off = "OFF";    ///< offset type
};
/// Appends the code that turns a flat index into each of `operands` operands' element offsets (declaring
/// them), given a Params argument in the strided layout above (magic-number division in 32-bit mode).
void emit_strided_offsets(std::string& s, int ndim, int operands, bool index64, const std::string& indent,
                          const StridedNames& names = {});

/// Whether the contiguous kernel of `op` in `compute` should use vector loads. Not for ops whose
/// device code is long (trigonometry, pow, float floor_divide/remainder, anything transcendental in
/// float64): they are compute-bound, and unrolling them `vector_width` times multiplies NVRTC's time.
bool elementwise_vectorizable(detail::OpCode op, DType compute);
/// The dtype a scalar input of `spec`'s op is passed as: bool for where's condition, else the compute
/// dtype with 16-bit floats widened to float32 (as the CPU stores scalars).
DType scalar_argument_dtype(detail::OpCode op, int input, DType compute);
/// The dtype an op computes in on the GPU: float32 for float16/bfloat16, else `compute`.
DType kernel_compute_dtype(DType compute);

// ------------------------------------------------------------------ reductions

enum class ReduceLayout : uint8_t {
  Rows,     ///< groups of `group` threads per output, reading along the reduced axes
  Columns,  ///< adjacent threads take adjacent outputs (block 32 x kBlockSize/32), rows over the reduced axes
};

/// Everything a reduction kernel's source depends on.
struct ReduceSpec {
  detail::ReduceOp op = detail::ReduceOp::Sum;
  DType in = DType::Float32;   ///< input storage dtype (for from_partials: still the original input's)
  DType out = DType::Float32;  ///< output storage dtype
  DType acc = DType::Float32;  ///< accumulator: Float32, Float64, Int64 or Bool (arg ops: the value's type)
  ReduceLayout layout = ReduceLayout::Rows;
  int group = 32;        ///< Rows: threads per output (1, 2, 4, ..., 32, or kBlockSize)
  int kept_ndim = 0;     ///< coalesced kept axes (0..kMaxRank)
  int reduced_ndim = 1;  ///< coalesced reduced axes (1..kMaxRank)
  int vector_width = 1;  ///< Rows with one contiguous reduced axis: elements per vector load
  bool index64 = false;
  bool from_partials = false;  ///< reads accumulators written by a split pass
  bool to_partials = false;    ///< writes accumulators (partials[o * splits + s]) instead of the output

  bool operator==(const ReduceSpec&) const = default;
};

/// Name of the generated kernel, e.g. "kiln_sum_f32_rows_g256_k0_r1_v4_i32".
std::string reduce_kernel_name(const ReduceSpec& spec);
/// Complete CUDA source (prelude + kernel) for `spec`.
std::string reduce_source(const ReduceSpec& spec);
/// The kernel part of reduce_source (no prelude), in a namespace named after the kernel.
std::string reduce_kernel_code(const ReduceSpec& spec);
/// Bytes of one accumulator of `spec` in a partials buffer.
int64_t reduce_accumulator_size(const ReduceSpec& spec);
/// The accumulator dtype kiln uses on the GPU for `op` over `in` into `out` (see reduce.cpp for the choice).
DType reduce_accumulator_dtype(detail::ReduceOp op, DType in, DType out);

// ------------------------------------------------------------------ the kernel table

/// A built-in kernel's identity: the device and its whole spec (equal only when every field is), so no new
/// op, dtype or spec field can make two kernels share an entry.
using BuiltinKernelKey = detail::DeviceKernelKey<std::variant<ElementwiseSpec, ReduceSpec>>;

}  // namespace kiln::cuda_impl

// Hashes over every field (a field added without being named here does not compile; equality, defaulted,
// covers new fields by itself).
KILN_HASH_EVERY_FIELD(kiln::cuda_impl::ElementwiseSpec, op, num_inputs, out, compute, in, scalar, raw_copy, layout,
                      vector_width, ndim, unroll, index64, tiled_inputs);
KILN_HASH_EVERY_FIELD(kiln::cuda_impl::ReduceSpec, op, in, out, acc, layout, group, kept_ndim, reduced_ndim,
                      vector_width, index64, from_partials, to_partials);

namespace kiln::cuda_impl {

/// Compiled built-in kernels by BuiltinKernelKey (kernel_table.hpp). The single owner of this state is
/// kernel_table(); it lives for the process.
using KernelTable = BasicKernelTable<BuiltinKernelKey>;

/// The process-wide table of built-in kernels.
KernelTable& kernel_table();

/// Loads generated `source` (kernel `name`) for `key.device` through load_module, records it under `key` in
/// kernel_table() and returns the entry (defined in elementwise.cpp; throws CompileError/CudaError).
const KernelTable::Entry& load_builtin_kernel(const BuiltinKernelKey& key, const std::string& source,
                                              const std::string& name);
/// NVRTC options of every built-in kernel (no fma contraction, so results match the CPU's).
const std::vector<std::string>& builtin_kernel_options();

/// Loads generated `source` (kernel `name`) for `device` through load_module with NVRTC `options` and returns
/// its entry (context function and occupancy included) without recording it anywhere (fused kernels and user
/// kernels keep their own).
KernelTable::Entry compile_kernel_entry(int device, const std::string& source, const std::string& name,
                                        const std::vector<std::string>& options = builtin_kernel_options());
/// Multiprocessors of GPU `device` (cached after the first query).
int multiprocessor_count(int device);

/// The device-side reduction operator type of `op` accumulating in `acc` (e.g. "kd::red_sum<float>"), shared by
/// the built-in reduction and fused-reduction generators.
std::string reduce_operator_type(detail::ReduceOp op, DType acc);
/// The reduction's load (kiln/reductions.def's cuda_load) of value expression `x` at reduced index `r` as
/// the accumulator ACC (whose value type is `value_type`).
std::string reduce_load_expression(detail::ReduceOp op, const std::string& value_type, const std::string& x,
                                   const std::string& r = "0");
/// Appends the combine of one reduction task's `group` threads (each holding `ACC acc` of operator type `Op`,
/// at 4 spaces of indent, inside the task loop): a butterfly of (sub-)warp shuffles for group 2..32 (masked to
/// the group's lanes below 32), and for group kBlockSize a warp shuffle, the warps' values through
/// `__shared__ ACC warp_acc[kBlockSize / 32]` (declared by the caller) and a second shuffle in the first warp,
/// which leaves the block's value in thread 0. Nothing for group 1. Shared by the built-in and fused
/// reduction generators.
void emit_group_combine(std::string& s, int group);

// ------------------------------------------------------------------ fused kernels' element code

/// How element code reads array argument k of a fused kernel: "a3" in an element function, "in3[o3]" in a loop.
using FusionArgument = std::function<std::string(size_t k)>;
/// Storage dtype of array argument k of a fused kernel (`inputs`: fusion_array_arguments(g)).
DType fusion_input_dtype(const detail::FusionGraph& g, const std::vector<int>& inputs, size_t k);
/// The expression of elementwise node `id` of `g`: its operands named v<id>, weak operands s<slot>, array
/// arguments read through `arg`. Throws DTypeError for an op without a GPU kernel for its compute dtype.
std::string fusion_node_expression(const detail::FusionGraph& g, const std::vector<int>& inputs, int id,
                                   const FusionArgument& arg);
/// The strong nodes `targets` read (themselves included), stopping at nodes already in `have` and at reductions.
std::vector<bool> fusion_needed_nodes(const detail::FusionGraph& g, const std::vector<int>& targets,
                                      const std::vector<bool>& have);
/// Appends `indent const T v<id> = <expression>;` for each node of `need` not in `have`, in graph order.
void emit_fusion_nodes(std::string& s, const detail::FusionGraph& g, const std::vector<int>& inputs,
                       const std::vector<bool>& need, const std::vector<bool>& have, const std::string& indent,
                       const FusionArgument& arg);

/// ceil(a / b) for a >= 0, b >= 1.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The smallest power of two >= v, at most `cap` (1 for v <= 1).
inline int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

/// The unsigned type NVRTC loads `bytes` bytes with in one instruction ("uint4" for 16, ...).
inline const char* raw_type(int bytes) {
  switch (bytes) {
    case 16: return "uint4";
    case 8: return "uint2";
    case 4: return "unsigned int";
    case 2: return "unsigned short";
    default: return "unsigned char";
  }
}

/// 16-byte vectors each thread of a contiguous elementwise kernel (built-in or fused) loads per input before
/// computing: 4 with at most one array input (a copy, cast or op with a scalar), 2 with two, else 1.
inline int contiguous_unroll(int array_inputs) { return array_inputs <= 1 ? 4 : array_inputs == 2 ? 2 : 1; }

/// C type name of a dtype's storage in generated code ("float", "kd::half_t", ...).
const char* device_type_name(DType t);
/// Short dtype tag for kernel names ("f32", "bf16", "b8", ...).
const char* dtype_tag(DType t);

}  // namespace kiln::cuda_impl
