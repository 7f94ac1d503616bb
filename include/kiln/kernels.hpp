// User kernels from source strings, as CuPy's ElementwiseKernel and
// ReductionKernel: a few lines of CUDA C++ become a kernel that broadcasts,
// handles any strides, resolves type placeholders from the arguments and is
// compiled with NVRTC once per type signature (cached in memory and on disk).
//
// Parameters are written "float32 x, T y, raw T a": an optional `raw`, a type
// (a dtype name such as float32/int32/float16, or a one-letter placeholder
// bound by the arguments), and a name. In the code:
// - a non-raw input is a const local holding this element's value; a non-raw
//   output is a reference to this element (assign to it);
// - a raw parameter is the whole array: `a[j]` reads or writes flat element j
//   (C order, any strides), `a.size()`, `a.shape()[d]`;
// - `i` is the element's flat index (C order over the broadcast shape), `n`
//   the number of elements;
// - float16/bfloat16 values are `float` in the code (as kiln's built-in GPU
//   ops compute them) and are rounded to nearest even when stored.
// An array may be passed as both an input and an output (each element is read
// before it is written); other overlaps between arguments are the caller's to
// avoid, as in CuPy. User kernels run on CUDA GPUs only; a call with CPU arrays
// throws DeviceError.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/array.hpp"

namespace kiln {

namespace detail {
struct ElementwiseKernelDef;
struct ReductionKernelDef;

/// What ElementwiseKernel and ReductionKernel share: the parsed definition (`Def`) and its accessors.
template <class Def>
class UserKernel {
 public:
  /// The kernel's name (its __global__ function's, and the prefix of its error messages).
  const std::string& name() const;
  /// Number of input and output parameters.
  int nin() const;
  int nout() const;

 protected:
  explicit UserKernel(std::shared_ptr<Def> def) : def_(std::move(def)) {}
  /// Throws ValueError when the kernel has several outputs (operator() returns one; call() returns all).
  void require_single_output() const;
  std::shared_ptr<Def> def_;
};
extern template class UserKernel<ElementwiseKernelDef>;
extern template class UserKernel<ReductionKernelDef>;
}  // namespace detail

/// One argument of a user kernel: an Array, or a C++ number passed by value to a non-raw input parameter.
class KernelArg {
 public:
  KernelArg(const Array& a) : array_(a), is_array_(true) {}  // NOLINT: implicit, so kernel(x, 2.0f) works
  KernelArg(const Scalar& s) : scalar_(s) {}                 // NOLINT
  template <Arithmetic T>
  KernelArg(T v) : scalar_(v) {}  // NOLINT
  bool is_array() const { return is_array_; }
  const Array& array() const { return array_; }
  const Scalar& scalar() const { return scalar_; }

 private:
  Array array_;
  Scalar scalar_;
  bool is_array_ = false;
};

/// Compile-time settings of an ElementwiseKernel.
struct ElementwiseKernelOptions {
  std::vector<std::string> options{};  ///< extra NVRTC options, e.g. {"--use_fast_math", "-DTILE=4"}
  std::string preamble{};              ///< code placed before the kernel (device functions, constants)
};

/// An elementwise kernel from source, like cupy.ElementwiseKernel:
///   ElementwiseKernel plus_one("int32 x", "int32 y", "y = x + 1", "plus_one");
///   Array y = plus_one(arange(10, int32, gpu(0)));          // 1, 2, ..., 10
/// Construction parses the parameters (ValueError on a syntax error, a bad name or an unknown type);
/// the code is compiled at the first call for each type signature and layout.
class ElementwiseKernel : public detail::UserKernel<detail::ElementwiseKernelDef> {
 public:
  ElementwiseKernel(const std::string& in_params, const std::string& out_params, const std::string& operation,
                    const std::string& name = "kernel", ElementwiseKernelOptions options = {});

  /// Runs the kernel on the arrays' GPU and current stream (asynchronous) and returns its only output.
  /// Arguments: every input, then optionally every output (else outputs are allocated with the inputs'
  /// broadcast shape and the parameters' dtypes). Outputs passed in are written in place: their version moves
  /// on as with any in-place op, so a backward that saved one throws. Throws ValueError when the kernel has
  /// several outputs (use call()), and as call() does.
  template <class... Args>
  Array operator()(const Args&... args) const {
    require_single_output();
    return single_output(call({KernelArg(args)...}));
  }
  /// Runs the kernel and returns every output. `size` gives the number of elements when no argument is a
  /// non-raw array (kernels over raw arrays only). Throws ValueError (argument count, size), DTypeError (a
  /// dtype that does not match its parameter, a placeholder no argument determines), ShapeError (inputs that
  /// do not broadcast, an output of the wrong shape), DeviceError (CPU arrays, arrays on two devices),
  /// CompileError (the code does not compile: NVRTC's log and the numbered source lines).
  std::vector<Array> call(const std::vector<KernelArg>& args, std::optional<int64_t> size = {}) const;

 private:
  Array single_output(std::vector<Array> outputs) const;
};

/// Compile-time settings of a ReductionKernel.
struct ReductionKernelOptions {
  std::vector<std::string> options{};  ///< extra NVRTC options
  std::string preamble{};              ///< code placed before the kernel
  /// Type of the values reduced (`a` and `b`): a dtype name, a C type (float, double, int, long long...) or
  /// a placeholder; empty: the first output's type. float16/bfloat16 reduce in float.
  std::string reduce_type{};
};

/// A reduction kernel from source, like cupy.ReductionKernel:
///   ReductionKernel l2norm("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm");
///   Array n = l2norm(x);              // over every axis
///   Array rows = l2norm(x, 1, true);  // over axis 1, keeping it as size 1
/// map_expr turns the inputs' elements into the reduce type, reduce_expr combines two values `a` and `b`
/// (it must be associative and commutative: elements are combined in a tree), post_map_expr writes the
/// outputs from the result `a`, identity (a C++ expression, or "" for none) starts every reduction.
class ReductionKernel : public detail::UserKernel<detail::ReductionKernelDef> {
 public:
  ReductionKernel(const std::string& in_params, const std::string& out_params, const std::string& map_expr,
                  const std::string& reduce_expr, const std::string& post_map_expr, const std::string& identity,
                  const std::string& name = "reduce_kernel", ReductionKernelOptions options = {});

  /// Reduces one input over `axis` (all axes by default); the output drops the reduced axes unless keepdims.
  Array operator()(const Array& x, Axes axis = {}, bool keepdims = false) const;
  /// Reduces over `axis` of the inputs' broadcast shape (inputs, then optionally the outputs, written in place
  /// and version-bumped as ElementwiseKernel's); returns the only output. Throws as call().
  Array operator()(const std::vector<KernelArg>& args, Axes axis = {}, bool keepdims = false) const;
  /// Runs the reduction and returns every output. Throws ValueError (argument count, an empty reduction
  /// without identity), ShapeError (a bad axis, inputs that do not broadcast, an output of the wrong shape),
  /// DTypeError, DeviceError and CompileError as ElementwiseKernel::call.
  std::vector<Array> call(const std::vector<KernelArg>& args, Axes axis = {}, bool keepdims = false) const;
};

}  // namespace kiln
