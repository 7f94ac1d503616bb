// Code generation for user ElementwiseKernels and ReductionKernels (internal).
// A variant is described by a spec (the user's code, every parameter's dtypes
// and kind, the layout class); the spec without the user's code (which is the
// kernel object's), with the device, keys the kernel object's variant memo
// (compared field by field), and on a miss the source (kiln's prelude, the user
// prelude below, placeholder typedefs, the preamble, the kernel) goes through
// load_module, whose memory and disk caches it shares with the built-ins.
// No CUDA runtime calls: tests compile the output to PTX without a GPU.
//
// Kernel arguments, in this order:
// - per parameter: a non-raw array is a pointer to its storage dtype; a scalar is its value type by value
//   (float for float16/bfloat16); a raw array is kd::raw_array<S, ND, CONTIGUOUS> by value
//   {S* data; i64 size; i64 shape[max(ND,1)]; i64 strides[max(ND,1)]} (strides in elements);
// - elementwise: for the strided layout the Params of codegen.hpp (operands = the non-raw arrays in
//   parameter order), then n (the index type);
// - reduction: const R* partials_in, R* partials_out (R the reduce value type), then Params: kept
//   size[kn], kept stride[input k][kn], kept stride[output m][kn], reduced size[rn], reduced
//   stride[input k][rn], num_out, num_red, splits, chunk (index-type words).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/kernel_memo.hpp"
#include "kiln/dtype.hpp"

namespace kiln::cuda_impl {

enum class UserArgKind : uint8_t { Array, Scalar, Raw };

/// One parameter of a variant.
struct UserParamSpec {
  std::string name;
  DType dtype = DType::Float32;    ///< the parameter's dtype (float16/bfloat16 are float in the code)
  DType storage = DType::Float32;  ///< arrays: the array's dtype (an input may differ when it casts safely)
  UserArgKind kind = UserArgKind::Array;
  bool output = false;
  int raw_ndim = 0;            ///< Raw: the array's rank (0..kMaxRank)
  bool raw_contiguous = true;  ///< Raw: C-contiguous, so a[j] is data[j]

  bool operator==(const UserParamSpec&) const = default;
};

/// Everything a user ElementwiseKernel variant's source depends on.
struct UserElementwiseSpec {
  std::string name, operation, preamble;
  std::vector<std::pair<std::string, DType>> types;  ///< placeholders
  std::vector<UserParamSpec> params;                 ///< inputs, then outputs
  bool contiguous = true;  ///< every non-raw array has stride 1 over one axis: offsets are the index
  int ndim = 1;            ///< strided: coalesced rank
  bool index64 = false;

  bool operator==(const UserElementwiseSpec&) const = default;
};

/// Which pass of a reduction a variant is.
enum class UserReducePass : uint8_t {
  Single,        ///< map, reduce, post-map into the outputs
  ToPartials,    ///< map and reduce one split of each output into partials_out[split * num_out + o]
  FromPartials,  ///< reduce each output's `splits` partials (stride num_out), post-map into the outputs
};

/// Everything a user ReductionKernel variant's source depends on.
struct UserReductionSpec {
  std::string name, map_expr, reduce_expr, post_map_expr, identity, preamble;
  std::vector<std::pair<std::string, DType>> types;
  std::vector<UserParamSpec> params;
  DType reduce_type = DType::Float32;
  int kept_ndim = 0;     ///< 0..kMaxRank
  int reduced_ndim = 1;  ///< 1..kMaxRank
  int group = 256;       ///< threads per (output, split) task: a power of two, 1..256
  bool index64 = false;
  UserReducePass pass = UserReducePass::Single;

  bool operator==(const UserReductionSpec&) const = default;
};

/// A compiled variant's identity in its kernel object's memo: the device and the whole spec (built without
/// the user's code and names, which with_code adds on a miss).
template <class Spec>
using UserVariantKey = detail::DeviceKernelKey<Spec>;

/// C type of a dtype's value in user code: "float" for float16/bfloat16, else the storage type.
const char* user_value_type(DType t);

/// Complete CUDA source of the variant; the __global__ function is extern "C" and named spec.name.
std::string user_elementwise_source(const UserElementwiseSpec& spec);
std::string user_reduction_source(const UserReductionSpec& spec);

}  // namespace kiln::cuda_impl

// Hashes over every field (a field added without being named here does not compile).
KILN_HASH_EVERY_FIELD(kiln::cuda_impl::UserParamSpec, name, dtype, storage, kind, output, raw_ndim, raw_contiguous);
KILN_HASH_EVERY_FIELD(kiln::cuda_impl::UserElementwiseSpec, name, operation, preamble, types, params, contiguous, ndim,
                      index64);
KILN_HASH_EVERY_FIELD(kiln::cuda_impl::UserReductionSpec, name, map_expr, reduce_expr, post_map_expr, identity,
                      preamble, types, params, reduce_type, kept_ndim, reduced_ndim, group, index64, pass);
