// User kernels (internal, device-neutral): parameter parsing, type
// resolution, argument checking and the call descriptions a GPU backend
// executes (include/kiln/kernels.hpp is the public side). Pure C++: the
// parsing and typing rules are tested without a GPU.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kernel_memo.hpp"
#include "kiln/kernels.hpp"

namespace kiln::detail {

/// One parameter, parsed from "[raw] type name".
struct KernelParam {
  std::string name;
  std::optional<DType> dtype;  ///< a fixed dtype ("float32 x"), or nullopt for a placeholder
  std::string placeholder;     ///< the one-letter type placeholder ("T x"), when dtype is nullopt
  bool raw = false;
  bool output = false;
  /// The type as written: "float32" or "T".
  std::string type_str() const { return dtype ? std::string(dtype_name(*dtype)) : placeholder; }
};

/// Parses a comma-separated parameter list ("float32 x, raw T y"); `what` is "input"/"output" for messages.
/// Throws ValueError naming `kernel` and the parameter: syntax, an unknown keyword or type, a bad name.
std::vector<KernelParam> parse_kernel_params(const std::string& params, bool outputs, const std::string& kernel);

/// A type as written for ReductionKernel's reduce_type: a dtype name, a C type name (float, double, int,
/// long long, ...) or a one-letter placeholder. Throws ValueError naming the kernel.
struct TypeSpec {
  std::optional<DType> dtype;
  std::string placeholder;
};
TypeSpec parse_type_spec(const std::string& type, const std::string& kernel, const char* what);

/// What both kernel kinds are defined by: the name, the parameters and the compile settings, and the
/// variants compiled so far.
struct KernelDef {
  std::string name, preamble;
  std::vector<std::string> options;
  std::vector<KernelParam> params;  ///< inputs, then outputs
  int nin = 0, nout = 0;
  /// Compiled variants, keyed by the backend's variant spec (device, dtypes, layout class); they go away with
  /// the kernel object.
  BackendKernels variants;
};

struct ElementwiseKernelDef : KernelDef {
  std::string operation;
};

struct ReductionKernelDef : KernelDef {
  std::string map_expr, reduce_expr, post_map_expr, identity;
  TypeSpec reduce_type;  ///< as given, or the first output's type
};

/// What type resolution sees of one argument: an array's dtype, or a scalar.
struct ArgType {
  bool is_array = false;
  DType dtype = DType::Float32;  ///< for arrays
  Scalar scalar;                 ///< for scalars
};

/// Placeholders bound to dtypes, in order of first appearance.
struct TypeMap {
  std::vector<std::pair<std::string, DType>> bound;
  std::optional<DType> find(const std::string& placeholder) const;
};

/// Binds every placeholder and checks every argument against its parameter (CuPy's rules): outputs passed
/// in must have their parameter's dtype exactly; an input array may have any dtype that casts safely to a
/// fixed parameter type (raw ones: exactly); arrays bind placeholders first, scalars bind what is left
/// (bool/int64/float64, promoted); scalars need a non-raw input parameter and a value of a kind the type
/// holds (no float for an integer). `args` holds the inputs then, when passed, the outputs. Throws
/// DTypeError/ValueError naming `kernel` and the parameter.
TypeMap resolve_kernel_types(const std::string& kernel, const std::vector<KernelParam>& params, int nin,
                             const std::vector<ArgType>& args);

/// The dtype of parameter `p` under `types`; throws DTypeError naming `kernel` when a placeholder is unbound.
DType param_dtype(const std::string& kernel, const KernelParam& p, const TypeMap& types);

/// One argument bound to its parameter, as a backend receives it.
struct BoundArg {
  const KernelParam* param = nullptr;
  DType dtype = DType::Float32;  ///< the parameter's resolved dtype (the value type in the code)
  bool is_scalar = false;
  Array array;    ///< arrays: non-raw ones broadcast to the call's shape (outputs have that shape)
  Scalar scalar;  ///< scalars: rounded to the parameter's precision (float16 values are exact halves)
};

/// A call of a user ElementwiseKernel, checked: one device (a GPU), outputs allocated.
struct UserElementwiseCall {
  const ElementwiseKernelDef* kernel = nullptr;
  std::vector<BoundArg> args;  ///< one per parameter, inputs then outputs
  TypeMap types;
  Shape shape;  ///< the broadcast shape the kernel runs over
  int64_t size = 0;
  Device device;
};

/// A call of a user ReductionKernel, checked: non-raw inputs broadcast to `in_shape`, outputs in keepdims
/// form (in_shape with the reduced axes set to 1).
struct UserReductionCall {
  const ReductionKernelDef* kernel = nullptr;
  std::vector<BoundArg> args;
  TypeMap types;
  DType reduce_type = DType::Float32;  ///< as written (float16 reduces in float)
  Shape in_shape;
  Shape axes;  ///< sorted, non-negative
  Device device;
};

}  // namespace kiln::detail
