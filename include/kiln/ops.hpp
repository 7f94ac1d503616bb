// Free functions on Arrays: creation, shape ops, elementwise math with NumPy
// broadcasting and NEP 50 promotion, reductions and matrix products.
// Every op runs on the device of its operands; mixing devices throws DeviceError.
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include "kiln/array.hpp"

namespace kiln {

// ---------------------------------------------------------------- creation
// `device` defaults to current_device(); `dtype` to float32 for empty/zeros/ones.

/// Uninitialised array.
Array empty(const Shape& shape, DType dtype = float32, std::optional<Device> device = {}, ArrayOptions options = {});
/// Array of zeros.
Array zeros(const Shape& shape, DType dtype = float32, std::optional<Device> device = {}, ArrayOptions options = {});
/// Array of ones.
Array ones(const Shape& shape, DType dtype = float32, std::optional<Device> device = {}, ArrayOptions options = {});
/// Array filled with `value`; dtype defaults to int64 for integer, float32 for float, bool for bool values.
Array full(const Shape& shape, const Scalar& value, std::optional<DType> dtype = {}, std::optional<Device> device = {},
           ArrayOptions options = {});
/// Values 0, 1, ..., stop-1. dtype: int64 for integer stop, float32 for float.
Array arange(const Scalar& stop, std::optional<DType> dtype = {}, std::optional<Device> device = {});
/// Values start, start+step, ... < stop (> stop for a negative step); throws ValueError for step 0.
Array arange(const Scalar& start, const Scalar& stop, const Scalar& step, std::optional<DType> dtype = {},
             std::optional<Device> device = {});
/// `num` evenly spaced values from start to stop (stop included when `endpoint`).
Array linspace(double start, double stop, int64_t num = 50, bool endpoint = true, DType dtype = float32,
               std::optional<Device> device = {});
/// Identity-like 2-d array: ones on diagonal k.
Array eye(int64_t n, std::optional<int64_t> m = {}, int64_t k = 0, DType dtype = float32,
          std::optional<Device> device = {});
Array empty_like(const Array& a, std::optional<DType> dtype = {}, std::optional<Device> device = {});
Array zeros_like(const Array& a, std::optional<DType> dtype = {}, std::optional<Device> device = {});
Array ones_like(const Array& a, std::optional<DType> dtype = {}, std::optional<Device> device = {});
Array full_like(const Array& a, const Scalar& value, std::optional<DType> dtype = {}, std::optional<Device> device = {});
/// Copies `nbytes = prod(shape)*itemsize(dtype)` bytes from host memory at `data` into a new array.
Array from_data(const void* data, const Shape& shape, DType dtype, std::optional<Device> device = {});
/// Copies a vector into a new array of dtype_of<T>() (shape defaults to {v.size()}); throws ShapeError on a size mismatch.
template <class T>
Array from_data(const std::vector<T>& v, std::optional<Shape> shape = {}, std::optional<Device> device = {});
/// from_data({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}): a new array of dtype_of<T>() from a braced list;
/// throws ShapeError when the values do not fill `shape`.
template <class T>
Array from_data(std::initializer_list<T> values, const Shape& shape, std::optional<Device> device = {}) {
  return from_data(std::vector<T>(values), shape, device);
}
/// from_data({1.f, 2.f}): a 1-d array on the current device.
template <class T>
Array from_data(std::initializer_list<T> values) {
  return from_data(std::vector<T>(values));
}
/// A 0-d array holding `value` (dtype from the value: bool, int64 or float64 unless given).
Array scalar_array(const Scalar& value, std::optional<DType> dtype = {}, std::optional<Device> device = {});

// ---------------------------------------------------------------- shape ops
/// View when the strides allow it, copy otherwise. One extent may be -1. Throws ShapeError on a size mismatch.
Array reshape(const Array& a, const Shape& shape);
/// Reverses the axes (a view).
Array transpose(const Array& a);
/// Reorders the axes (a view); throws ShapeError unless `axes` is a permutation.
Array permute(const Array& a, const Shape& axes);
Array swapaxes(const Array& a, int64_t axis1, int64_t axis2);
Array moveaxis(const Array& a, int64_t source, int64_t destination);
/// Drops size-1 axes (all of them, or the listed ones; a listed axis of another size throws ShapeError).
Array squeeze(const Array& a, Axes axes = {});
/// Inserts a size-1 axis at `axis` (a view).
Array expand_dims(const Array& a, int64_t axis);
/// A read-only-by-convention view broadcast to `shape` (stride 0 on new/size-1 axes).
Array broadcast_to(const Array& a, const Shape& shape);
/// Broadcasts several arrays against each other.
std::vector<Array> broadcast_arrays(const std::vector<Array>& arrays);
Array ravel(const Array& a);
Array contiguous(const Array& a);
Array copy(const Array& a);
Array astype(const Array& a, DType dtype);
/// Joins arrays along an existing axis (dtypes promoted). Throws ShapeError/DeviceError on mismatches.
Array concatenate(const std::vector<Array>& arrays, int64_t axis = 0);
/// Joins arrays along a new axis.
Array stack(const std::vector<Array>& arrays, int64_t axis = 0);
/// Splits into `sections` equal parts (ShapeError when it does not divide) — views.
std::vector<Array> split(const Array& a, int64_t sections, int64_t axis = 0);
/// Splits at the given indices — views.
std::vector<Array> split(const Array& a, const std::vector<int64_t>& indices, int64_t axis = 0);
/// A view with explicit shape/strides (elements) over a's storage; throws ShapeError when it would read outside it.
Array as_strided(const Array& a, const Shape& shape, const Shape& strides, std::optional<int64_t> offset = {});

// ---------------------------------------------------------------- elementwise
/// An Array or a C++ scalar, so each binary op takes either on either side.
class Operand {
 public:
  Operand(const Array& a) : array_(&a) {}  // NOLINT
  template <Arithmetic T> Operand(T v) : scalar_(v) {}  // NOLINT
  template <std::floating_point F> Operand(std::complex<F> v) : scalar_(v) {}  // NOLINT: a complex scalar
  Operand(const Scalar& s) : scalar_(s) {}  // NOLINT
  bool is_array() const { return array_ != nullptr; }
  const Array& array() const { return *array_; }
  const Scalar& scalar() const { return scalar_; }

 private:
  const Array* array_ = nullptr;
  Scalar scalar_;
};

namespace detail {
/// While alive, lets the next elementwise op on this thread write its result into `temporary`
/// instead of a new array, when `temporary` is an operand, is the only handle to its storage and
/// already has the result's shape, dtype and contiguous layout (NumPy's temporary elision, from
/// 256 KiB). Used by the rvalue overloads below; `(x * 2 + 1)` then allocates one array, not two.
class DonorScope {
 public:
  explicit DonorScope(const Array& temporary);
  ~DonorScope();
  DonorScope(const DonorScope&) = delete;
  DonorScope& operator=(const DonorScope&) = delete;

 private:
  const Array* previous_;
};
}  // namespace detail

// One function per `Fn` row of kiln/ops.def (the op list), each with an out= form that writes the result
// into `out` (same_kind cast, broadcast shape) and returns it. NumPy's semantics and names; see the row's
// comment in ops.def for kiln's choices. Unary ops also take a temporary, whose memory may hold the result.
// Throw DTypeError for dtypes the op rejects (bitwise ops on floats, subtract/negative on bool),
// ShapeError when shapes do not broadcast, DeviceError for operands on different devices.
// Asynchronous on a GPU.
/// signbit(x): the sign bit, so true for -0.0 and -NaN, which no comparison sees (x < 0 for integers).
// The ops beyond NumPy's, for neural networks (float results; integer inputs
// compute in float as exp does):
/// erf(x): the error function.
/// softplus(x) = log(1 + exp(x)), computed as log1p(exp(-|x|)) + max(x, 0): no overflow for large x.
/// gelu(x) = x * Phi(x) = x/2 * erfc(-x/sqrt(2)) (PyTorch's exact gelu; the erfc form is accurate for x < 0).
/// gelu_tanh(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) (PyTorch's approximate="tanh").
/// silu(x) = x * sigmoid(x) = x / (1 + exp(-x)).
/// logaddexp(a, b) = log(exp(a) + exp(b)) without overflow (NumPy's algorithm: equal infinities give them).
#define KILN_DECLARE_Fn1(name)                                                                               \
  /** name(a) elementwise. */                                                                                \
  Array name(const Array& a);                                                                                \
  /** name(a) written into out. */                                                                           \
  Array name(const Array& a, const Array& out);                                                              \
  inline Array name(Array&& a) {                                                                             \
    detail::DonorScope donor(a);                                                                             \
    return name(static_cast<const Array&>(a));                                                               \
  }
#define KILN_DECLARE_Fn2(name)                                                                               \
  /** name(a, b) elementwise with broadcasting; either side may be a C++ scalar (weak). */                   \
  Array name(const Operand& a, const Operand& b);                                                            \
  /** name(a, b) written into out. */                                                                        \
  Array name(const Operand& a, const Operand& b, const Array& out);
#define KILN_DECLARE_Own3(name)
#define KILN_DECLARE_None0(name)
#define KILN_DECLARE_None1(name)
#define KILN_DECLARE(name, arity, api) KILN_DECLARE_##api##arity(name)
#define KILN_OP(Code, name, arity, api, ...) KILN_DECLARE(name, arity, api)
#include "kiln/ops.def"
#undef KILN_DECLARE
#undef KILN_DECLARE_Fn1
#undef KILN_DECLARE_Fn2
#undef KILN_DECLARE_Own3
#undef KILN_DECLARE_None0
#undef KILN_DECLARE_None1

/// cond ? x : y elementwise, broadcasting all three; x/y dtypes promoted.
Array where(const Operand& cond, const Operand& x, const Operand& y);
/// min(max(a, lo), hi) elementwise.
Array clip(const Array& a, const Operand& lo, const Operand& hi);

// C++ operators (Array with Array, or Array with a scalar on either side). Overloads taking a
// temporary (Array&&) may reuse its memory for the result (see detail::DonorScope).
Array operator-(const Array& a);
inline Array operator-(Array&& a) {
  detail::DonorScope donor(a);
  return negative(static_cast<const Array&>(a));
}
Array operator!(const Array& a);
Array operator~(const Array& a);
#define KILN_OPERATOR(sym, fn) \
  inline Array operator sym(const Array& a, const Array& b) { return fn(a, b); } \
  template <Arithmetic T> Array operator sym(const Array& a, T b) { return fn(a, b); } \
  template <Arithmetic T> Array operator sym(T a, const Array& b) { return fn(a, b); } \
  inline Array operator sym(Array&& a, const Array& b) { \
    detail::DonorScope donor(a); \
    return fn(a, b); \
  } \
  inline Array operator sym(const Array& a, Array&& b) { \
    detail::DonorScope donor(b); \
    return fn(a, b); \
  } \
  inline Array operator sym(Array&& a, Array&& b) { \
    detail::DonorScope donor(a); \
    return fn(a, b); \
  } \
  template <Arithmetic T> Array operator sym(Array&& a, T b) { \
    detail::DonorScope donor(a); \
    return fn(a, b); \
  } \
  template <Arithmetic T> Array operator sym(T a, Array&& b) { \
    detail::DonorScope donor(b); \
    return fn(a, b); \
  }
KILN_OPERATOR(+, add) KILN_OPERATOR(-, subtract) KILN_OPERATOR(*, multiply) KILN_OPERATOR(/, divide)
KILN_OPERATOR(%, remainder) KILN_OPERATOR(==, equal) KILN_OPERATOR(!=, not_equal) KILN_OPERATOR(<, less)
KILN_OPERATOR(<=, less_equal) KILN_OPERATOR(>, greater) KILN_OPERATOR(>=, greater_equal)
KILN_OPERATOR(&, bitwise_and) KILN_OPERATOR(|, bitwise_or) KILN_OPERATOR(^, bitwise_xor)
#undef KILN_OPERATOR

// ---------------------------------------------------------------- reductions
// One function per `Axes` row of kiln/reductions.def (the reduction list): `name(a, axes, keepdims)` reduces
// over `axes` (all of them by default; an empty list reduces nothing and returns a converted copy), keeping
// the reduced axes as size 1 when `keepdims`. Result dtypes follow NumPy 2: sum/prod of bool and integers
// give int64 (uint8 too: kiln has no uint64), of floats the input dtype; mean of integers gives float64;
// all/any give bool; logsumexp gives float_result_type. float16/bfloat16/float32 accumulate in float64 on
// the CPU. Over zero elements: sum 0, prod 1, mean NaN, all true, any false, logsumexp -inf; max and min
// have no identity and throw ValueError. NaN propagates through max/min; NaN is true for all/any.
// logsumexp is log(sum(exp(a))), max-shifted so it neither overflows nor underflows, computed in float64;
// +inf wins. Axis errors throw ShapeError naming the op, the axis and the shape.
#define KILN_REDUCTION(Code, name, api) KILN_REDUCTION_##api(name)
#define KILN_REDUCTION_Axes(name) Array name(const Array& a, Axes axes = {}, bool keepdims = false);
#define KILN_REDUCTION_Own(name)
#define KILN_REDUCTION_None(name)
#include "kiln/reductions.def"
#undef KILN_REDUCTION_Axes
#undef KILN_REDUCTION_Own
#undef KILN_REDUCTION_None

/// Variance with `ddof` delta degrees of freedom (NumPy's default ddof=0), two-pass in float64.
Array var(const Array& a, Axes axes = {}, int64_t ddof = 0, bool keepdims = false);
Array std(const Array& a, Axes axes = {}, int64_t ddof = 0, bool keepdims = false);
/// Index (int64) of the first maximum along `axis`, or in the flattened array.
Array argmax(const Array& a, std::optional<int64_t> axis = {}, bool keepdims = false);
Array argmin(const Array& a, std::optional<int64_t> axis = {}, bool keepdims = false);
/// Cumulative sum along `axis` (all elements flattened when absent), NumPy's dtypes: bool and integers
/// give int64, floats keep their dtype (accumulated in float64). Throws ShapeError for a bad axis.
Array cumsum(const Array& a, std::optional<int64_t> axis = {});
/// Cumulative product along `axis` (flattened when absent); dtypes as cumsum.
Array cumprod(const Array& a, std::optional<int64_t> axis = {});

// ---------------------------------------------------------------- linear algebra
/// NumPy matmul: 1-d operands are promoted to matrices and the added axis removed; >2-d batch axes broadcast.
/// float32/float64 through BLAS (cuBLAS on a GPU); other dtypes through a plain loop. Throws ShapeError on a
/// contraction mismatch, naming both shapes.
Array matmul(const Array& a, const Array& b);
/// torch.addmm(bias, a, b) (beta = alpha = 1): the 2-d product a @ b plus `bias` broadcast to it. When a, b and a
/// bias of n values (shape (n,) or (1, n)) share one floating dtype, the bias is folded into the product where
/// the backend can (cuBLASLt's bias epilogue on the GPU, as PyTorch's addmm; the float accumulator on the CPU,
/// where the sum is rounded once); otherwise it is matmul(a, b) + bias (float16/bfloat16: a float32 product plus
/// the bias, rounded once). Differentiable (the bias's gradient is the
/// result's summed over the rows). ShapeError when a or b is not 2-d, the inner sizes differ or the bias does
/// not broadcast to (m, n).
Array addmm(const Array& bias, const Array& a, const Array& b);
/// gelu_tanh(addmm(bias, a, b)) as one step (torch._addmm_activation with use_gelu): in the folded form, GELU's
/// tanh form is applied to the sum before its one rounding (the float accumulator on the CPU; on a GPU cuBLASLt's
/// GELU_AUX_BIAS epilogue for float16/bfloat16, one kernel), and the sum itself is kept for the gradient;
/// otherwise (and for float32/float64 on a GPU) gelu_tanh of addmm's result. The same checks and errors as addmm
/// (naming addmm_gelu). Differentiable.
Array addmm_gelu(const Array& bias, const Array& a, const Array& b);
/// NumPy dot: scalar product of 1-d arrays, matmul for 2-d, sum over last axis of a and second-to-last of b.
Array dot(const Array& a, const Array& b);
namespace linalg {
/// Frobenius norm of a matrix, 2-norm of a vector (sqrt of the sum of squares over all elements),
/// or the 2-norm along `axes`. Squares are summed in float64 and the root narrowed once to the input's float
/// dtype (float64 for integers and bool); one reduction pass (one GPU kernel, two for a split reduction).
Array norm(const Array& a, Axes axes = {}, bool keepdims = false);
}  // namespace linalg

// ---------------------------------------------------------------- templates
template <class T>
Array from_data(const std::vector<T>& v, std::optional<Shape> shape, std::optional<Device> device) {
  Shape s = shape ? *shape : Shape{static_cast<int64_t>(v.size())};
  if (shape_numel(s) != static_cast<int64_t>(v.size()))
    throw ShapeError("from_data: " + std::to_string(v.size()) + " values do not fill shape " + shape_str(s) +
                     "; pass a shape whose product is the vector's size");
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(v.begin(), v.end());
    return from_data(static_cast<const void*>(bytes.data()), s, DType::Bool, device);
  } else {
    return from_data(static_cast<const void*>(v.data()), s, dtype_of<T>(), device);
  }
}

}  // namespace kiln
